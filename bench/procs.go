package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// spawner starts child processes from one goroutine locked to an OS thread
// that never exits. The children get a parent-death signal of SIGKILL, and
// Linux sends it when the forking thread ends, so forking from any other
// thread could kill a child early; this way they die only with the bench.
type spawner struct {
	reqs chan spawnReq

	mu    sync.Mutex
	procs map[*proc]struct{}
}

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

func newSpawner() *spawner {
	s := &spawner{reqs: make(chan spawnReq), procs: map[*proc]struct{}{}}
	go func() {
		runtime.LockOSThread() // never unlocked: this thread must outlive every child
		for r := range s.reqs {
			r.done <- r.cmd.Start()
		}
	}()
	return s
}

// proc is one child process: an agent or a bare Envoy.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	started time.Time // just before the fork

	done   chan struct{} // closed when it has exited and been reaped
	exited time.Time
	err    error
}

// start runs bin with args; its output goes to logPath (appended).
func (s *spawner) start(name, logPath string, env []string, bin string, args ...string) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &proc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	r := spawnReq{cmd: cmd, done: make(chan error, 1)}
	p.started = time.Now()
	s.reqs <- r
	if err := <-r.done; err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	s.mu.Lock()
	s.procs[p] = struct{}{}
	s.mu.Unlock()
	go func() {
		p.err = cmd.Wait()
		p.exited = time.Now()
		logf.Close()
		s.mu.Lock()
		delete(s.procs, p)
		s.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// killAll SIGKILLs every child still running (by its pid) and reaps it.
func (s *spawner) killAll() {
	s.mu.Lock()
	var ps []*proc
	for p := range s.procs {
		ps = append(ps, p)
	}
	s.mu.Unlock()
	for _, p := range ps {
		p.kill()
	}
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) signal(sig syscall.Signal) {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(sig)
	}
}

// kill SIGKILLs the process and waits (briefly) until it is reaped.
func (p *proc) kill() {
	p.signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
	}
}

// wait waits up to timeout for the process to exit.
func (p *proc) wait(ctx context.Context, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
		return fmt.Errorf("%s (pid %d) still running after %s", p.name, p.pid(), timeout)
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", p.name, ctx.Err())
	}
}

// stop sends SIGTERM, waits up to timeout, then SIGKILLs.
func (p *proc) stop(ctx context.Context, timeout time.Duration) error {
	p.signal(syscall.SIGTERM)
	if err := p.wait(ctx, timeout); err != nil {
		p.kill()
		return err
	}
	return nil
}

// exitedEarly reports whether the process has exited already.
func (p *proc) exitedEarly() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// tail returns the last n lines of the process's log, for error messages.
func (p *proc) tail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// failure adds the end of p's log to err.
func (p *proc) failure(err error) error {
	if t := p.tail(8); t != "" {
		return fmt.Errorf("%w; last log lines of %s:\n%s", err, p.name, t)
	}
	return err
}
