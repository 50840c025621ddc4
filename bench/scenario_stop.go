package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

const (
	slowFor      = 2 * time.Second // how long the upstream sleeps on a slow request
	slowRequests = 6
	stopDrain    = 3 * time.Second // termination_drain_duration of the stop scenario
	stopMinDrain = time.Second
	stopLimit    = 20 * time.Second // SIGTERM to exit, at most
)

// slowResult is one slow request's outcome.
type slowResult struct {
	ok     bool
	err    string
	closed time.Time // when its connection was closed by the client
}

// startSlow sends n slow requests, each on its own connection, which the
// client closes as soon as the answer is read.
func startSlow(port, n int) (wait func() []slowResult) {
	var wg sync.WaitGroup
	out := make([]slowResult, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := oneShot(slowFor + 8*time.Second)
			resp, err := c.Get(localURL(port, fmt.Sprintf("/slow?d=%s&i=%d", slowFor, i)))
			if err != nil {
				out[i] = slowResult{err: envoykit.ErrClass(err.Error()), closed: time.Now()}
				return
			}
			_, err = readAll(resp)
			out[i] = slowResult{ok: err == nil && resp.StatusCode == http.StatusOK, closed: time.Now()}
			if err != nil {
				out[i].err = envoykit.ErrClass(err.Error())
			} else if resp.StatusCode != http.StatusOK {
				out[i].err = fmt.Sprintf("http_%d", resp.StatusCode)
			}
		}()
	}
	return func() []slowResult { wg.Wait(); return out }
}

// scenarioStop is scenario 3: SIGTERM under load with slow requests in
// flight, to the agent (it drains) and to a bare Envoy; then the agent
// with exit_on_zero_active_connections.
func (b *bench) scenarioStop(ctx context.Context) (*StopResult, error) {
	r := &StopResult{SlowMs: ms(slowFor), TerminationDrain: ms(stopDrain), MinDrain: ms(stopMinDrain)}
	agent, err := b.stopAgent(ctx)
	if err != nil {
		return r, fmt.Errorf("agent: %w", err)
	}
	r.Agent = *agent
	bare, err := b.stopBare(ctx)
	if err != nil {
		return r, fmt.Errorf("baseline: %w", err)
	}
	r.Baseline = *bare
	zero, err := b.stopOnZero(ctx)
	if err != nil {
		return r, fmt.Errorf("exit on zero connections: %w", err)
	}
	r.ExitOnZero = *zero
	return r, nil
}

// stopTarget is one process to stop: it starts it and says how to reach it.
type stopTarget struct {
	p        *proc
	listener int
	ready    func() error
}

func (b *bench) stopAgentTarget(ctx context.Context, name string, exitOnZero bool, drain time.Duration) (*stopTarget, error) {
	// Envoy's drain time is longer than the agent's drain, so that its
	// listeners keep accepting until the agent stops it.
	run, err := b.setupAgent(ctx, name, agentSetup{version: name, procName: name, drain: agentConfig{
		DrainDuration: drain + 2*time.Second, ParentShutdown: drain + 3*time.Second, TerminationDrain: drain, MinDrain: stopMinDrain, ExitOnZero: exitOnZero}})
	if err != nil {
		return nil, err
	}
	return &stopTarget{p: run.p, listener: run.listener(), ready: func() error {
		defer run.ns.Close()
		return run.waitReady(ctx)
	}}, nil
}

func (b *bench) stopAgent(ctx context.Context) (*StopSide, error) {
	t, err := b.stopAgentTarget(ctx, "stop-agent", false, stopDrain)
	if err != nil {
		return nil, err
	}
	return b.stopUnderLoad(ctx, t)
}

func (b *bench) stopBare(ctx context.Context) (*StopSide, error) {
	s, p, err := b.setupEnvoy("stop-envoy", "stop-envoy", "stop", 1)
	if err != nil {
		return nil, err
	}
	t := &stopTarget{p: p, listener: s.listener(), ready: func() error {
		_, err := pollReady(ctx, p, s.admin, time.Millisecond, startTimeout)
		return err
	}}
	return b.stopUnderLoad(ctx, t)
}

// stopUnderLoad runs the load for a second, starts the slow requests, and
// SIGTERMs the process while they are in flight.
func (b *bench) stopUnderLoad(ctx context.Context, t *stopTarget) (*StopSide, error) {
	defer t.p.Kill()
	if err := t.ready(); err != nil {
		return nil, err
	}
	l := b.startLoad(t.listener, stopLimit+5*time.Second)
	sleep(ctx, time.Second)
	waitSlow := startSlow(t.listener, slowRequests)
	if err := b.waitSlowInFlight(ctx, slowRequests); err != nil {
		l.Stop()
		return nil, err
	}
	sigAt := time.Now()
	t.p.Signal(syscall.SIGTERM)
	werr := t.p.wait(ctx, stopLimit)
	samples := l.Stop()
	slow := waitSlow()
	if werr != nil {
		return nil, t.p.failure(werr)
	}
	side := &StopSide{SlowInFlight: len(slow), SlowFailedBy: map[string]int{}, ExitMs: ms(t.p.Exited().Sub(sigAt)), ExitStatus: exitStatus(t.p)}
	for _, s := range slow {
		if !s.ok {
			side.SlowFailed++
			side.SlowFailedBy[s.err]++
		}
	}
	sig, exit := sigAt.Sub(l.Start()), t.p.Exited().Sub(l.Start())
	var before, during []envoykit.Sample
	for _, s := range samples {
		switch {
		case s.At < sig:
			before = append(before, s)
		case s.At < exit:
			during = append(during, s)
		}
	}
	side.LoadBeforeSignal, side.LoadDuringDrain = loadStats(before), loadStats(during)
	side.FirstFailMs = -1
	for _, s := range during {
		if !s.OK {
			side.FirstFailMs = ms(s.At - sig)
			break
		}
	}
	b.logf("stop (%s): exit after %.0fms, %d/%d slow requests failed, %d/%d load requests failed between SIGTERM and exit",
		t.p.name, side.ExitMs, side.SlowFailed, side.SlowInFlight, side.LoadDuringDrain.Failed, side.LoadDuringDrain.Sent)
	return side, nil
}

// stopOnZero measures exit_on_zero_active_connections: the load stops at
// SIGTERM (its clients have gone elsewhere), the slow requests finish, and
// the agent should exit within one drain poll of the last close (or of
// min_drain_duration, whichever is later).
func (b *bench) stopOnZero(ctx context.Context) (*ZeroConnResult, error) {
	t, err := b.stopAgentTarget(ctx, "stop-agent-zero", true, 10*time.Second)
	if err != nil {
		return nil, err
	}
	defer t.p.Kill()
	if err := t.ready(); err != nil {
		return nil, err
	}
	l := b.startLoad(t.listener, 5*time.Second)
	sleep(ctx, time.Second)
	waitSlow := startSlow(t.listener, slowRequests/2)
	if err := b.waitSlowInFlight(ctx, slowRequests/2); err != nil {
		l.Stop()
		return nil, err
	}
	sigAt := time.Now()
	t.p.Signal(syscall.SIGTERM)
	l.Stop() // closes its keep-alive connections
	lastClose := time.Now()
	slow := waitSlow()
	werr := t.p.wait(ctx, stopLimit)
	if werr != nil {
		return nil, t.p.failure(werr)
	}
	z := &ZeroConnResult{MinDrainMs: ms(stopMinDrain), PollMs: ms(envoy.DefaultDrainPollInterval), SlowInFlight: len(slow), ExitStatus: exitStatus(t.p)}
	for _, s := range slow {
		if !s.ok {
			z.SlowFailed++
		}
		if s.closed.After(lastClose) {
			lastClose = s.closed
		}
	}
	z.LastCloseMs = ms(lastClose.Sub(sigAt))
	z.ExitMs = ms(t.p.Exited().Sub(sigAt))
	from := lastClose
	if earliest := sigAt.Add(stopMinDrain); earliest.After(from) {
		from = earliest
	}
	z.DelayMs = ms(t.p.Exited().Sub(from))
	b.logf("stop on zero connections: last close %.0fms, exit %.0fms after SIGTERM: %.0fms later", z.LastCloseMs, z.ExitMs, z.DelayMs)
	return z, nil
}

// waitSlowInFlight waits until the upstream holds n slow requests: they
// are in flight through Envoy.
func (b *bench) waitSlowInFlight(ctx context.Context, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for b.up.SlowInFlight() < n {
		select {
		case <-ctx.Done():
			return fmt.Errorf("only %d of %d slow requests reached the upstream: %w", b.up.SlowInFlight(), n, ctx.Err())
		case <-tick.C:
		}
	}
	return nil
}

func exitStatus(p *proc) string {
	if p.Err() == nil {
		return "exit 0"
	}
	return p.Err().Error()
}

// readAll reads and closes the body (at most 1 MiB of it).
func readAll(resp *http.Response) (int64, error) {
	defer resp.Body.Close()
	return io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
}
