//go:build linux

// A reload without hot restart: drain the serving Envoy, stop it, start the
// new one (for an Envoy whose hot restart is compiled out).

package envoy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy/cli"
	"github.com/envoy-agent/envoy-agent/envoy/epochfiles"
	"github.com/envoy-agent/envoy-agent/internal/hostfiles"
)

// HotRestartDisabled is what `envoy --hot-restart-version` prints for a
// binary built without hot restart (Istio's and AWS's builds turn it off),
// and what /server_info reports for an Envoy run with --disable-hot-restart.
// Such an Envoy must run with --disable-hot-restart (ProxyConfig's
// DisableHotRestart), and a reload can only drain and restart it
// (ReloadPlan's DrainRestart path).
const HotRestartDisabled = cli.HotRestartDisabled

// RestartPlan is how a drain and restart drains the serving Envoy and how
// long each start may take.
type RestartPlan struct {
	// MinDrain is the least the drain waits; it then ends as soon as no
	// downstream connection is left (a restart gains nothing by keeping
	// an idle Envoy), and at MaxDrain at the latest.
	MinDrain, MaxDrain time.Duration
	// StartTimeout bounds the new Envoy's start, and that of the previous
	// configuration's when the new one does not come up.
	StartTimeout time.Duration
	// Progress, when not nil, is called at every poll of the drain and
	// once at its end.
	Progress func(DrainProgress)
}

// DrainRestartError is a drain and restart whose new Envoy did not become
// LIVE. The serving Envoy had been drained and stopped by then; Recovery
// says whether the previous configuration serves again.
type DrainRestartError struct {
	Err       error
	LastLines []string // the failed Envoy's last log lines
	Recovery  string
}

func (e *DrainRestartError) Error() string {
	msg := fmt.Sprintf("the new Envoy did not start: %v", e.Err)
	if len(e.LastLines) > 0 {
		msg += " (its last log line: " + e.LastLines[len(e.LastLines)-1] + ")"
	}
	return msg + "; " + e.Recovery
}

func (e *DrainRestartError) Unwrap() error { return e.Err }

// drainAndRestart replaces the serving Envoy with one that runs cfg from
// copied (a copy that CopyBootstrap made, validated by the caller), without
// hot restart: it fails Envoy's health checks and drains its listeners as a
// stop does (plan), stops it and every epoch left, then starts a new Envoy
// (epoch 0, with or without hot restart as cfg says) and waits until it is
// LIVE. Connections still open when the drain ends are closed, and no
// listener accepts between the old Envoy's exit and the new one's start.
//
// When the new Envoy does not come up, the previous configuration is started
// again (a *DrainRestartError says how that went); when that fails too, no
// Envoy serves and Run returns the stopped Envoy's exit. It returns how
// long the drain took.
func (e *Envoy) drainAndRestart(ctx context.Context, cfg ProxyConfig, copied string, plan RestartPlan) (drained time.Duration, err error) {
	defer func() {
		if copied != "" { // refused before an Envoy took it
			_ = os.Remove(copied)
		}
	}()
	if copied == "" {
		return 0, errors.New("restart: no bootstrap copy given")
	}
	e.restartMu.Lock()
	defer e.restartMu.Unlock()
	// Run must not end when the serving Envoy exits: a new one takes its
	// place (see Run).
	e.replacing.Store(true)
	defer e.replacing.Store(false)
	prev := e.config()
	if err := sameIdentity(prev, cfg); err != nil {
		return 0, err
	}
	old := e.serving()
	if old == nil || old.exited() {
		return 0, errors.New("no serving envoy to restart")
	}
	// The serving configuration, kept to start it again if the new one
	// does not come up (the serving Envoy's own copy goes with it).
	kept, err := e.copyBootstrap(prev, old.files.Copy, 0)
	if err != nil {
		return 0, fmt.Errorf("keep the serving configuration: %w", err)
	}
	keep := kept.Path
	defer func() {
		if keep != "" {
			_ = os.Remove(keep)
		}
	}()

	start := time.Now()
	// One count before the listeners drain, so that the count knows their
	// addresses after the graceful drain closes them (package conncount).
	_, _ = e.countConnections(nil)
	if err := e.Drain(false); err != nil {
		e.log.Warnf("restart: drain: %v", err)
	}
	reason := e.waitRestartDrain(ctx, old, start, plan)
	drained = time.Since(start)
	e.log.Infof("restart: envoy pid %d drained for %s (%s); stopping it", old.pid, drained.Round(time.Millisecond), reason)
	e.stopEpochs()
	if !prev.DisableHotRestart {
		if err := hostfiles.RemoveSharedMemory(prev.BaseID); err != nil {
			e.log.Warnf("restart: remove envoy's shared memory: %v", err)
		}
	}

	e.admin.Reconnect()
	p, err := e.startLive(ctx, cfg, copied, plan.StartTimeout)
	copied = "" // the new Envoy's now, or removed
	if err == nil {
		e.mu.Lock()
		e.cfg = cfg
		e.mu.Unlock()
		e.setServing(p)
		e.log.Infof("restart: envoy pid %d is LIVE in place of pid %d", p.pid, old.pid)
		return drained, nil
	}
	rerr := &DrainRestartError{Err: err}
	var se *startLiveError
	if errors.As(err, &se) {
		rerr.Err, rerr.LastLines = se.err, se.lastLines
	}
	e.log.Warnf("restart: the new envoy did not start (%v); starting the previous configuration again", rerr.Err)
	rp, err := e.startLive(ctx, prev, keep, plan.StartTimeout)
	keep = ""
	if err != nil {
		rerr.Recovery = fmt.Sprintf("starting the previous configuration again failed too (%v): no Envoy is serving", err)
		return drained, rerr
	}
	e.setServing(rp)
	rerr.Recovery = fmt.Sprintf("the previous configuration serves again (pid %d)", rp.pid)
	return drained, rerr
}

// waitRestartDrain waits while the serving Envoy drains before a restart:
// at least plan.MinDrain, then until no connection is left, at most
// plan.MaxDrain; it ends early when Envoy exits or ctx ends. It returns why
// it ended.
func (e *Envoy) waitRestartDrain(ctx context.Context, old *process, start time.Time, plan RestartPlan) string {
	count := func() int {
		cctx, cancel := context.WithTimeout(ctx, drainPollTimeoutFloor)
		defer cancel()
		n, err := e.ActiveConnections(cctx)
		if err != nil {
			return -1
		}
		return n
	}
	report := func(p DrainProgress) {
		if plan.Progress != nil {
			plan.Progress(p)
		}
	}
	return drainWait{min: plan.MinDrain, max: plan.MaxDrain, untilZero: true, poll: DefaultDrainPollInterval, count: count,
		exited: old.done, cut: ctx.Done(), report: report}.run(start)
}

// stopEpochs stops the serving epoch through its admin API and any epoch
// left by signal, as a stop does, but leaves the proxy open for a new one.
func (e *Envoy) stopEpochs() {
	e.mu.Lock()
	cur := e.cur
	var others []*process
	for p := range e.procs {
		if p != cur {
			others = append(others, p)
		}
	}
	e.mu.Unlock()
	e.stop(cur)
	for _, p := range others {
		e.stopReplaced(p)
	}
}

// startLiveError is a start that failed, with the Envoy's last lines.
type startLiveError struct {
	err       error
	lastLines []string
}

func (e *startLiveError) Error() string { return e.err.Error() }
func (e *startLiveError) Unwrap() error { return e.err }

// startLive starts epoch 0 of cfg from the bootstrap copy and waits up to
// timeout until it is LIVE; an Envoy that is not is killed.
func (e *Envoy) startLive(ctx context.Context, cfg ProxyConfig, copied string, timeout time.Duration) (*process, error) {
	p, err := e.startEpochFrom(cfg, &epochfiles.Copy{Path: copied}, 0)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := e.waitEpochLive(ctx, p, cfg); err != nil {
		lines := p.relay.LastLines()
		e.abandon(p)
		return nil, &startLiveError{err: err, lastLines: lines}
	}
	return p, nil
}
