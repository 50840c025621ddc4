package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// procs are the bench's children: each an envoykit.Process (forked from one
// locked thread, in its own process group, SIGKILLed if the bench dies),
// with its log in a file, so that a scenario can kill what it started.
type procs struct {
	mu  sync.Mutex
	set map[*proc]struct{}
}

func newProcs() *procs { return &procs{set: map[*proc]struct{}{}} }

// proc is one child process: an agent or a bare Envoy.
type proc struct {
	*envoykit.Process
	name    string
	logPath string
}

// start runs bin with args, the environment cleaned of systemd's variables
// plus env; its output goes to logPath (appended).
func (s *procs) start(name, logPath string, env []string, bin string, args ...string) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s log: %w", name, err)
	}
	ep, err := envoykit.Start(bin, args, logf, env...)
	if err != nil {
		logf.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p := &proc{Process: ep, name: name, logPath: logPath}
	s.mu.Lock()
	s.set[p] = struct{}{}
	s.mu.Unlock()
	go func() {
		<-p.Done()
		logf.Close()
		s.mu.Lock()
		delete(s.set, p)
		s.mu.Unlock()
	}()
	return p, nil
}

// killAll SIGKILLs every child still running and reaps it.
func (s *procs) killAll() {
	s.mu.Lock()
	var ps []*proc
	for p := range s.set {
		ps = append(ps, p)
	}
	s.mu.Unlock()
	for _, p := range ps {
		p.Kill()
	}
}

func (p *proc) pid() int { return p.Pid() }

// wait waits up to timeout for the process to exit.
func (p *proc) wait(ctx context.Context, timeout time.Duration) error {
	if err := p.Wait(ctx, timeout); err != nil {
		return fmt.Errorf("%s: %w", p.name, err)
	}
	return nil
}

// stop sends SIGTERM, waits up to timeout, then SIGKILLs.
func (p *proc) stop(ctx context.Context, timeout time.Duration) error {
	p.Signal(syscall.SIGTERM)
	if err := p.wait(ctx, timeout); err != nil {
		p.Kill()
		return err
	}
	return nil
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

// exitedEarly reports whether the process has exited already.
func (p *proc) exitedEarly() bool { return !p.Running() }
