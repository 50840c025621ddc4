//go:build linux

package envoy

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envoy-agent/envoy-agent/envoy/epochfiles"
	"github.com/envoy-agent/envoy-agent/envoy/output"
	"github.com/envoy-agent/envoy-agent/envoy/reexec"
	"github.com/envoy-agent/envoy-agent/internal/printable"
)

// process is one running Envoy: one hot-restart epoch.
type process struct {
	epoch            int
	proc             *os.Process
	pid              int
	started          time.Time
	replaced         time.Time // when a newer epoch took over serving; guarded by Envoy.mu
	adminAddressPath string
	files            *epochfiles.Files // the bootstrap copy it runs from, and its resource files
	binary           os.FileInfo       // the binary file as it was when this epoch started (nil: adopted)
	relay            *output.Relay     // where outputs are copied; it keeps stderr's last lines
	outputs          []*outputPipe     // Envoy's output that the agent copies (kept across a re-exec)
	done             chan struct{}     // closed once Wait returned
	waitErr          error             // set before done is closed
}

// outputPipe is the read end of a pipe Envoy writes its stdout or stderr
// to. The agent makes the pipe itself (rather than letting os/exec do it)
// so that the read end can survive a re-exec of the agent.
type outputPipe struct {
	stream string // "stdout" or "stderr"
	r      *os.File
	copied chan struct{} // closed when the copy reached EOF
}

func (o *outputPipe) copyTo(w io.Writer) {
	go func() {
		defer close(o.copied)
		_, _ = io.Copy(w, o.r)
		_ = o.r.Close()
	}()
}

// startProcess starts Envoy in its own process group with a parent-death
// signal of SIGKILL. Linux sends that signal when the thread that forked the
// child exits, not the process (golang/go#27505), so the fork happens on the
// forker thread (package reexec), which never exits; the wait can happen anywhere.
func startProcess(binary string, args, env []string, epoch int, adminAddressPath string, stdout, stderr io.Writer) (*process, error) {
	p := &process{
		epoch:            epoch,
		adminAddressPath: adminAddressPath,
		relay:            output.NewRelay(stdout, stderr),
		done:             make(chan struct{}),
	}
	cmd := exec.Command(binary, args...)
	cmd.Env = env // nil: the agent's own
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var writeEnds []*os.File
	closeWriteEnds := func() {
		for _, w := range writeEnds {
			_ = w.Close()
		}
	}
	// Both of Envoy's outputs go through pipes the agent copies into the
	// relay (package output): a whole line at a time, with the
	// configuration dumps left out of stderr, and stderr's last lines kept.
	outs := []struct {
		stream string
		w      io.Writer
		set    func(io.Writer)
	}{
		{"stdout", p.relay.Stdout(), func(w io.Writer) { cmd.Stdout = w }},
		{"stderr", p.relay.Stderr(), func(w io.Writer) { cmd.Stderr = w }},
	}
	for _, o := range outs {
		r, w, err := os.Pipe()
		if err != nil {
			closeWriteEnds()
			return nil, fmt.Errorf("start envoy %s: %w", binary, err)
		}
		writeEnds = append(writeEnds, w)
		o.set(w)
		op := &outputPipe{stream: o.stream, r: r, copied: make(chan struct{})}
		op.copyTo(o.w)
		p.outputs = append(p.outputs, op)
	}

	var err error
	reexec.OnForkerThread(func() { err = cmd.Start() })
	closeWriteEnds() // Envoy has its copies
	if err != nil {
		for _, o := range p.outputs {
			<-o.copied
		}
		return nil, fmt.Errorf("start envoy %s: %w", binary, err)
	}
	p.proc = cmd.Process
	p.pid = cmd.Process.Pid
	p.started = time.Now()
	go p.reap()
	return p, nil
}

// reap waits for the process, started here or adopted from the agent before
// a re-exec (a child of this process either way), and records how it ended
// once its output is copied (the relay must hold its last lines); then it
// closes done. The pipes are the agent's own (outputPipe), so waiting on
// the os.Process is all exec.Cmd.Wait would do.
func (p *process) reap() {
	ps, err := p.proc.Wait()
	if err == nil && !ps.Success() {
		err = &exec.ExitError{ProcessState: ps}
	}
	for _, o := range p.outputs {
		<-o.copied
	}
	p.relay.Flush()
	p.waitErr = err
	close(p.done)
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
		_ = p.proc.Signal(sig)
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
	} else if sig, core, ok := e.Signal(); ok {
		b.WriteString(" (" + crashNote(sig, core, e.Pid, corePattern()) + ")")
	}
	if len(e.LastLines) > 0 {
		// Envoy's lines reach the operator's terminal: control characters
		// escaped (printable).
		b.WriteString("; its last log lines:\n  ")
		b.WriteString(strings.Join(printable.Strings(e.LastLines), "\n  "))
	}
	return b.String()
}

func (e *ExitError) Unwrap() error { return e.Err }

// Signal reports the signal that ended Envoy and whether the kernel dumped
// its core; ok is false when Envoy exited rather than died of a signal.
func (e *ExitError) Signal() (sig syscall.Signal, coreDumped, ok bool) {
	var ee *exec.ExitError
	if !errors.As(e.Err, &ee) {
		return 0, false, false
	}
	ws, isWS := ee.Sys().(syscall.WaitStatus)
	if !isWS || !ws.Signaled() {
		return 0, false, false
	}
	return ws.Signal(), ws.CoreDump(), true
}

// corePatternPath is the kernel's setting of where cores go.
const corePatternPath = "/proc/sys/kernel/core_pattern"

// corePattern reads the kernel's core_pattern, "" when it cannot.
func corePattern() string {
	b, err := os.ReadFile(corePatternPath)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// crashNote says which signal ended Envoy, whether a core was dumped and
// where to find it: with systemd-coredump as the kernel's core_pattern,
// coredumpctl has it under Envoy's pid.
func crashNote(sig syscall.Signal, core bool, pid int, pattern string) string {
	name := unix.SignalName(sig)
	if name == "" {
		name = fmt.Sprintf("signal %d", int(sig))
	}
	switch {
	case !core:
		return name + "; no core dumped: core dumps are off (LimitCORE= in the unit, ulimit -c) or the signal dumps none"
	case strings.Contains(pattern, "systemd-coredump"):
		return fmt.Sprintf("%s; core dumped: `coredumpctl info %d` shows it, `coredumpctl debug %d` opens it", name, pid, pid)
	case pattern != "":
		return fmt.Sprintf("%s; core dumped where the kernel's core_pattern %q puts it (relative to Envoy's working directory)", name, pattern)
	default:
		return name + "; core dumped"
	}
}

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
	return &ExitError{Epoch: p.epoch, Pid: p.pid, Err: p.waitErr, LastLines: p.relay.LastLines(), Ran: time.Since(p.started)}
}
