package envoy

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// process is one running Envoy: one hot-restart epoch.
type process struct {
	epoch            int
	cmd              *exec.Cmd
	pid              int
	started          time.Time
	replaced         time.Time // when a newer epoch took over serving; guarded by Envoy.mu
	adminAddressPath string
	snapshot         string // the copy of the bootstrap this epoch runs
	tail             *logTail
	done             chan struct{} // closed once Wait returned
	waitErr          error         // set before done is closed
}

// notifyEnv are the variables systemd sets for the agent alone; Envoy must
// not inherit them.
var notifyEnv = []string{"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"}

func childEnv(env []string) []string {
	out := make([]string, 0, len(env))
next:
	for _, kv := range env {
		for _, k := range notifyEnv {
			if strings.HasPrefix(kv, k+"=") {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}

// startProcess starts Envoy in its own process group with a parent-death
// signal of SIGKILL. Linux sends that signal when the thread that forked the
// child exits, not the process (golang/go#27505), so the fork and the wait
// happen on one goroutine locked to its OS thread for the child's lifetime.
func startProcess(binary string, args []string, epoch int, adminAddressPath string, stdout, stderr io.Writer) (*process, error) {
	p := &process{
		epoch:            epoch,
		adminAddressPath: adminAddressPath,
		tail:             newLogTail(tailLines),
		done:             make(chan struct{}),
	}
	cmd := exec.Command(binary, args...)
	cmd.Env = childEnv(os.Environ())
	// Envoy's output is relayed a whole line at a time (see lineWriter), and
	// reaches the agent's log and error reports only without the
	// configuration dumps it prints (see redact.go).
	outLines, errLines := newLineWriter(stdout), newLineWriter(stderr)
	cmd.Stdout = outLines
	relay := newRedactWriter(io.MultiWriter(errLines, p.tail))
	cmd.Stderr = relay
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p.cmd = cmd

	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// The goroutine ends locked, so its thread ends with it: only after
		// the child is gone, which is when the death signal no longer matters.
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		p.pid = cmd.Process.Pid
		p.started = time.Now()
		started <- nil
		p.waitErr = cmd.Wait()
		relay.Flush()
		outLines.Flush()
		errLines.Flush()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start envoy %s: %w", binary, err)
	}
	return p, nil
}

// exited reports whether the process has been reaped.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signalGroup sends sig to Envoy's process group.
func (p *process) signalGroup(sig syscall.Signal) {
	if p.exited() {
		return
	}
	if err := syscall.Kill(-p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		_ = p.cmd.Process.Signal(sig)
	}
}

// waitFor waits up to d for the process to exit.
func (p *process) waitFor(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

// ExitError is how Run reports an Envoy that exited by itself.
type ExitError struct {
	Epoch     int
	Pid       int
	Err       error    // from exec.Cmd.Wait; nil when Envoy exited with status 0
	LastLines []string // the last lines Envoy wrote to stderr
	Ran       time.Duration
}

func (e *ExitError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "envoy (pid %d, epoch %d) exited by itself after %s", e.Pid, e.Epoch, e.Ran.Round(time.Millisecond))
	switch {
	case e.Err == nil:
		b.WriteString(" with status 0")
	default:
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	if e.Killed() {
		b.WriteString(" (SIGKILL: the kernel's OOM killer or an operator's kill -9)")
	}
	if len(e.LastLines) > 0 {
		b.WriteString("; its last log lines:\n  ")
		b.WriteString(strings.Join(e.LastLines, "\n  "))
	}
	return b.String()
}

func (e *ExitError) Unwrap() error { return e.Err }

// Killed reports whether Envoy died of SIGKILL.
func (e *ExitError) Killed() bool {
	var ee *exec.ExitError
	if !errors.As(e.Err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

func (p *process) exitError() *ExitError {
	return &ExitError{Epoch: p.epoch, Pid: p.pid, Err: p.waitErr, LastLines: Redact(p.tail.Lines()), Ran: time.Since(p.started)}
}
