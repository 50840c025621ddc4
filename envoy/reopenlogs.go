//go:build linux

package envoy

import (
	"context"
	"errors"
	"fmt"
	"syscall"
)

// ReopenLogs has every live epoch reopen its log files (access logs, --log-path), as logrotate
// needs after it renamed them: Envoy goes on writing to the renamed files until it reopens them,
// then creates new ones at the configured paths. It returns how many epochs were told.
//
// The serving epoch is told through its admin API (POST /reopen_logs). Epochs that a hot restart
// replaced and that are still draining have no admin API any more (the new epoch took the port
// over), so they get SIGUSR1, which Envoy handles the same way. Hot restarts are waited for, so
// that no epoch that is still starting, which SIGUSR1 would kill before Envoy installed its
// handler, is signalled; call ReopenLogs only once Envoy has been LIVE for the same reason.
func (e *Envoy) ReopenLogs(ctx context.Context) (int, error) {
	e.restartMu.Lock()
	defer e.restartMu.Unlock()
	e.mu.Lock()
	cur := e.cur
	var replaced []*process
	for p := range e.procs {
		if p != cur && !p.exited() {
			replaced = append(replaced, p)
		}
	}
	e.mu.Unlock()
	if cur == nil || cur.exited() {
		return 0, errors.New("no envoy is running")
	}
	told := 0
	var errs []error
	if err := e.admin.ReopenLogs(ctx); err != nil {
		errs = append(errs, fmt.Errorf("epoch %d (pid %d): %w", cur.epoch, cur.pid, err))
	} else {
		told++
	}
	for _, p := range replaced {
		if err := p.proc.Signal(syscall.SIGUSR1); err != nil {
			if !p.exited() {
				errs = append(errs, fmt.Errorf("epoch %d (pid %d): SIGUSR1: %w", p.epoch, p.pid, err))
			}
			continue
		}
		told++
	}
	return told, errors.Join(errs...)
}
