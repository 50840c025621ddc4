package envoy

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// errAbort is what the agent sends Proxy.Run to stop Envoy after (or instead
// of) a drain.
var errAbort = errors.New("envoy stopped by the agent")

// DefaultDrainPollInterval is how often a drain reads Envoy's active
// connections and reports its progress.
const DefaultDrainPollInterval = 250 * time.Millisecond

// DrainProgress is what a drain reports while it runs.
type DrainProgress struct {
	Elapsed   time.Duration // since the drain began
	Remaining time.Duration // until termination_drain_duration ends it
	// ActiveConnections is Envoy's active downstream connection count, or
	// -1 when it could not be read.
	ActiveConnections int
	Done              bool   // the last report of this drain
	Reason            string // why it ended, on the last report
}

// Agent supervises one Proxy: it runs it and, when its context ends, drains
// it and stops it, as Istio's pkg/envoy Agent does. Run lists the exit paths.
type Agent struct {
	proxy                       Proxy
	terminationDrainDuration    time.Duration
	minDrainDuration            time.Duration
	exitOnZeroActiveConnections bool
	localhost                   string
	adminPort                   int
	statusPort                  int
	prometheusPort              int

	admin *AdminClient
	log   Logger

	abortCh  chan error
	statusCh chan error
	exited   chan struct{} // closed when Proxy.Run returned

	skipDrain atomic.Bool
	draining  atomic.Bool
	cutOnce   sync.Once
	cut       chan struct{} // closed to end a drain at once

	pollInterval time.Duration
	onProgress   func(DrainProgress)
	settingsMu   sync.Mutex // guards the three drain settings after NewAgent
}

// SetDrainSettings changes the drain settings NewAgent took, for the next
// stop (a configuration reload).
func (a *Agent) SetDrainSettings(terminationDrainDuration, minDrainDuration time.Duration, exitOnZeroActiveConnections bool) {
	a.settingsMu.Lock()
	defer a.settingsMu.Unlock()
	a.terminationDrainDuration = terminationDrainDuration
	a.minDrainDuration = minDrainDuration
	a.exitOnZeroActiveConnections = exitOnZeroActiveConnections
}

func (a *Agent) drainSettings() (termination, minDrain time.Duration, exitOnZero bool) {
	a.settingsMu.Lock()
	defer a.settingsMu.Unlock()
	return a.terminationDrainDuration, min(a.minDrainDuration, a.terminationDrainDuration), a.exitOnZeroActiveConnections
}

// NewAgent returns an Agent for proxy. terminationDrainDuration bounds a stop's
// drain; minDrainDuration is the least it waits before it may end early at
// zero active connections (exitOnZeroActiveConnections). adminPort is Envoy's
// admin port on localhost; statusPort and prometheusPort are the agent's own.
func NewAgent(proxy Proxy, terminationDrainDuration, minDrainDuration time.Duration, localhost string,
	adminPort, statusPort, prometheusPort int, exitOnZeroActiveConnections bool) *Agent {
	return &Agent{
		proxy:                       proxy,
		terminationDrainDuration:    terminationDrainDuration,
		minDrainDuration:            minDrainDuration,
		exitOnZeroActiveConnections: exitOnZeroActiveConnections,
		localhost:                   localhost,
		adminPort:                   adminPort,
		statusPort:                  statusPort,
		prometheusPort:              prometheusPort,
		admin:                       adminFor(proxy, localhost, adminPort),
		log:                         nopLogger{},
		abortCh:                     make(chan error, 1),
		statusCh:                    make(chan error, 1),
		exited:                      make(chan struct{}),
		cut:                         make(chan struct{}),
		pollInterval:                DefaultDrainPollInterval,
		onProgress:                  func(DrainProgress) {},
	}
}

// SetLogger sets where the agent logs; call it before Run.
func (a *Agent) SetLogger(l Logger) { a.log = loggerOrNop(l) }

// SetDrainPollInterval sets how often a drain reads the connection count;
// call it before Run.
func (a *Agent) SetDrainPollInterval(d time.Duration) {
	if d > 0 {
		a.pollInterval = d
	}
}

// OnDrainProgress sets a function called at each drain poll and once at its
// end; call it before Run.
func (a *Agent) OnDrainProgress(f func(DrainProgress)) {
	if f != nil {
		a.onProgress = f
	}
}

// Draining reports whether a drain has begun (a stop or DrainNow).
func (a *Agent) Draining() bool { return a.draining.Load() }

// Exited is closed when Envoy has exited and Run is about to return.
func (a *Agent) Exited() <-chan struct{} { return a.exited }

// Run starts the proxy and blocks until it is gone. Its exit paths:
//  1. Envoy exits by itself: Run returns its *ExitError.
//  2. DisableDraining, then ctx ends (the agent's /quitquitquit): Envoy is
//     stopped at once, with no drain; Run returns nil.
//  3. ctx ends (SIGTERM): Envoy is drained (see terminate), then stopped;
//     Run returns nil.
//  4. DrainNow (the agent's /drain), later ctx ends: the drain has no end
//     until then, and Envoy is stopped at once; Run returns nil.
//
// An error from Envoy exiting during the drain on its own (a crash) is
// returned too.
func (a *Agent) Run(ctx context.Context) error {
	go a.runWait()
	select {
	case err := <-a.statusCh:
		return a.exitErr(err, false)
	case <-ctx.Done():
		a.terminate()
		return a.exitErr(<-a.statusCh, true)
	}
}

func (a *Agent) runWait() {
	err := a.proxy.Run(a.abortCh)
	a.proxy.Cleanup()
	close(a.exited)
	a.statusCh <- err
}

func (a *Agent) exitErr(err error, stopping bool) error {
	if errors.Is(err, errAbort) {
		a.log.Infof("envoy stopped")
		return nil
	}
	var ee *ExitError
	if stopping && errors.As(err, &ee) && ee.Err == nil {
		// Envoy exited cleanly while being stopped (a drain or a quit of
		// its own): that is the outcome the stop wanted.
		a.log.Infof("envoy exited during the stop")
		return nil
	}
	if err != nil {
		a.log.Errorf("%v", err)
	}
	return err
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
	a.log.Infof("draining envoy: up to %s (at least %s%s)", termination, minDrain, atZero)
	if err := a.proxy.Drain(false); err != nil {
		a.log.Warnf("drain: %v", err)
	}
	reason := a.waitDrain(start, termination, minDrain, exitOnZero)
	a.onProgress(DrainProgress{Elapsed: time.Since(start), ActiveConnections: a.connections(), Done: true, Reason: reason})
	a.log.Infof("drain ended after %s: %s", time.Since(start).Round(time.Millisecond), reason)
	a.abortCh <- errAbort
}

func (a *Agent) waitDrain(start time.Time, termination, minDrain time.Duration, exitOnZero bool) string {
	deadline := start.Add(termination)
	earliest := start.Add(minDrain)
	tick := time.NewTicker(a.pollInterval)
	defer tick.Stop()
	end := time.NewTimer(time.Until(deadline))
	defer end.Stop()
	for {
		select {
		case <-a.exited:
			return "envoy exited"
		case <-a.cut:
			return "drain cut short"
		case <-end.C:
			return "termination drain duration reached"
		case <-tick.C:
		}
		now := time.Now()
		n := a.connections()
		a.onProgress(DrainProgress{Elapsed: now.Sub(start), Remaining: deadline.Sub(now), ActiveConnections: n})
		if exitOnZero && n == 0 && !now.Before(earliest) {
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
	ctx, cancel := context.WithTimeout(context.Background(), max(a.pollInterval, 200*time.Millisecond))
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
