//go:build linux

// The drain of a stop: fail health checks, drain the listeners, wait for the
// connections (see docs/design.md, section 3).

package envoy

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy/adminapi"
)

// DefaultDrainPollInterval is how often a drain reads Envoy's active
// connections and reports its progress.
const DefaultDrainPollInterval = 250 * time.Millisecond

// drainBoundReason is why a drain that ran to termination_drain_duration ended.
const drainBoundReason = "termination drain duration reached"

// DrainProgress is what a drain reports while it runs.
type DrainProgress struct {
	Elapsed   time.Duration // since the drain began
	Remaining time.Duration // until termination_drain_duration ends it
	// ActiveConnections is Envoy's active downstream connection count, or
	// -1 when it could not be read.
	ActiveConnections int
	Done              bool   // the last report of this drain
	Reason            string // why it ended, on the last report
	// AtBound is set on the last report of a drain that ran to its bound
	// (termination_drain_duration) rather than ending early.
	AtBound bool
}

// DrainNow starts a drain with no end: listeners stay open, health checks
// fail, and the next stop skips the drain. It is the agent's /drain.
func (a *Agent) DrainNow() {
	a.draining.Store(true)
	if err := a.proxy.Drain(true); err != nil {
		a.log.Warnf("drain: %v", err)
	}
	a.DisableDraining()
}

// DisableDraining makes a later stop skip the drain, and ends a drain that
// is under way at once (the second SIGTERM).
func (a *Agent) DisableDraining() {
	a.skipDrain.Store(true)
	a.cutOnce.Do(func() { close(a.cut) })
}

// terminate drains Envoy, then tells Proxy.Run to stop it. A drain fails
// health checks and drains the listeners gracefully, then waits at least
// minDrainDuration; with exitOnZeroActiveConnections it ends as soon as no
// connection is left, otherwise it waits terminationDrainDuration. It never
// waits past terminationDrainDuration, and it ends early when Envoy exits or
// DisableDraining is called.
func (a *Agent) terminate() {
	if a.skipDrain.Load() {
		a.log.Infof("stopping envoy without a drain")
		a.abortCh <- errAbort
		return
	}
	a.draining.Store(true)
	start := time.Now()
	termination, minDrain, exitOnZero := a.drainSettings()
	atZero := ""
	if exitOnZero {
		atZero = ", ending at zero active connections"
	}
	// One count before the listeners drain: the graceful drain closes them
	// after Envoy's drain time, and the count knows their addresses only
	// from having seen them listen (envoy/conncount).
	conns := "unknown"
	if n := a.connections(); n >= 0 {
		conns = strconv.Itoa(n)
	}
	a.log.Infof("draining envoy: up to %s (at least %s%s); active connections: %s", termination, minDrain, atZero, conns)
	if err := a.proxy.Drain(false); err != nil {
		a.log.Warnf("drain: %v", err)
	}
	reason := drainWait{min: minDrain, max: termination, untilZero: exitOnZero, poll: a.pollInterval, count: a.connections,
		exited: a.exited, cut: a.cut, report: func(p DrainProgress) { a.onProgress(p) }}.run(start)
	a.log.Infof("drain ended after %s: %s", time.Since(start).Round(time.Millisecond), reason)
	a.abortCh <- errAbort
}

// drainWait is the one wait of a drain, at a stop (Agent.terminate) and
// before a restart (Envoy.waitRestartDrain): at least min, then, when
// untilZero, until no connection is left, at most max; it ends early when
// exited or cut is closed. Every poll is reported, and the last report has
// Done and the reason run returns.
type drainWait struct {
	min, max  time.Duration
	untilZero bool
	poll      time.Duration
	count     func() int // -1 when the connections cannot be counted
	exited    <-chan struct{}
	cut       <-chan struct{}
	report    func(DrainProgress)
}

// run waits from start and returns why the wait ended.
func (w drainWait) run(start time.Time) string {
	reason := w.wait(start)
	w.report(DrainProgress{Elapsed: time.Since(start), ActiveConnections: w.count(), Done: true, Reason: reason, AtBound: reason == drainBoundReason})
	return reason
}

func (w drainWait) wait(start time.Time) string {
	deadline, earliest := start.Add(w.max), start.Add(min(w.min, w.max))
	tick := time.NewTicker(w.poll)
	defer tick.Stop()
	end := time.NewTimer(time.Until(deadline))
	defer end.Stop()
	for {
		select {
		case <-w.exited:
			return "envoy exited"
		case <-w.cut:
			return "drain cut short"
		case <-end.C:
			return drainBoundReason
		case <-tick.C:
		}
		now := time.Now()
		n := w.count()
		w.report(DrainProgress{Elapsed: now.Sub(start), Remaining: deadline.Sub(now), ActiveConnections: n})
		if w.untilZero && n == 0 && !now.Before(earliest) {
			return "no active connections left"
		}
	}
}

// connectionCounter is a Proxy that counts its own downstream connections
// (every epoch's, for *Envoy).
type connectionCounter interface {
	ActiveConnections(context.Context) (int, error)
}

// connections reads the active connection count, -1 when Envoy does not
// say: from the proxy when it can count them (every epoch's), otherwise
// from the admin API's gauges.
func (a *Agent) connections() int {
	ctx, cancel := context.WithTimeout(context.Background(), max(a.pollInterval, drainPollTimeoutFloor))
	defer cancel()
	count := a.admin.ActiveConnections
	if c, ok := a.proxy.(connectionCounter); ok {
		count = c.ActiveConnections
	}
	n, err := count(ctx)
	if err != nil {
		return -1
	}
	return n
}

// DrainListeners starts a graceful drain of the Envoy whose admin API is on
// localhost:adminPort, as Istio's does: all listeners, or only inbound ones
// with inboundonly; skipExit keeps the listeners open with no end.
func DrainListeners(adminPort uint32, inboundonly, skipExit bool) error {
	c := adminapi.New("localhost", int(adminPort))
	if err := c.DrainListeners(context.Background(), inboundonly, true, skipExit); err != nil {
		return fmt.Errorf("drain listeners: %w", err)
	}
	return nil
}
