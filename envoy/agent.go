//go:build linux

package envoy

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy/adminapi"
)

// errAbort is what the agent sends Proxy.Run to stop Envoy after (or instead
// of) a drain.
var errAbort = errors.New("envoy stopped by the agent")

// Agent supervises one Proxy: it runs it and, when its context ends, drains
// it and stops it, as Istio's pkg/envoy Agent does. Run lists the exit paths.
type Agent struct {
	proxy                       Proxy
	terminationDrainDuration    time.Duration
	minDrainDuration            time.Duration
	exitOnZeroActiveConnections bool
	localhost                   string
	adminPort                   int

	admin *adminapi.Client
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
// admin port on localhost.
//
// statusPort and prometheusPort keep Istio's signature and have no effect
// here. Istio serves them through Envoy listeners and leaves those out of
// the drain's connection count; envoy-agent serves both itself, so Envoy
// never holds a connection on them, and the count (every epoch's sockets
// on Envoy's listening addresses) has nothing of theirs to leave out
// (cmd/envoy-agent's TestStopDrainsWithRequestInFlight holds kept-alive
// connections to both through a stop that ends at zero connections).
func NewAgent(proxy Proxy, terminationDrainDuration, minDrainDuration time.Duration, localhost string,
	adminPort, _, _ int, exitOnZeroActiveConnections bool) *Agent {
	return &Agent{
		proxy:                       proxy,
		terminationDrainDuration:    terminationDrainDuration,
		minDrainDuration:            minDrainDuration,
		exitOnZeroActiveConnections: exitOnZeroActiveConnections,
		localhost:                   localhost,
		adminPort:                   adminPort,
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

// adminFor is the admin client an Agent uses: its Envoy's own (which knows
// a unix socket admin), else one for localhost:adminPort.
func adminFor(proxy Proxy, localhost string, adminPort int) *adminapi.Client {
	if e, ok := proxy.(*Envoy); ok {
		return e.Admin()
	}
	return adminapi.New(localhost, adminPort)
}
