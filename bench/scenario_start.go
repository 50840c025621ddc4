package main

import (
	"context"
	"fmt"
	"time"
)

// startTimeout bounds one start in the start scenario.
const startTimeout = 30 * time.Second

// probeStarts are the extra agent starts that tell the agent's part apart.
const probeStarts = 6

// scenarioStart is scenario 1: from exec to ready, the agent (READY=1 on
// its notify socket) against a bare Envoy (/ready polled every 1ms). The
// two alternate, so that a noisy neighbour hurts both alike.
func (b *bench) scenarioStart(ctx context.Context) (*StartResult, error) {
	run, err := b.setupAgent(ctx, "start", agentSetup{version: "start", drain: quickDrain})
	if err != nil {
		return nil, err
	}
	ns := run.ns
	defer ns.Close()

	// agentStart starts the agent once and returns exec to READY=1. With
	// probe, the bench also polls Envoy's /ready every 1ms meanwhile and
	// returns when Envoy was LIVE, to tell Envoy's start from the agent's
	// part (the probe adds load, so these starts are not in the main figure).
	agentStart := func(probe bool) (total, gap time.Duration, err error) {
		if err := run.writeConfig(b); err != nil {
			return 0, 0, err
		}
		mark := ns.Mark()
		p, err := b.startAgentRun(run, "start-agent")
		if err != nil {
			return 0, 0, err
		}
		live := make(chan time.Time, 1)
		if probe {
			go func() {
				at, _ := pollReady(ctx, p, run.admin, time.Millisecond, startTimeout)
				live <- at
			}()
		}
		at, err := waitNotify(ctx, ns, p, "READY=1", mark, startTimeout)
		if probe && err == nil {
			if liveAt := <-live; !liveAt.IsZero() {
				gap = at.Sub(liveAt)
			}
		}
		if qerr := quitAgent(ctx, p, run.controlSocket()); err == nil && qerr != nil {
			err = fmt.Errorf("stop the agent: %w", qerr)
		}
		return at.Sub(p.Started()), gap, err
	}
	agentOnce := func() (time.Duration, error) {
		d, _, err := agentStart(false)
		return d, err
	}
	bareOnce := func() (time.Duration, error) {
		p, err := b.startEnvoy("start-envoy", run.bootPath)
		if err != nil {
			return 0, err
		}
		at, err := pollReady(ctx, p, run.admin, time.Millisecond, startTimeout)
		if serr := p.stop(ctx, 10*time.Second); err == nil && serr != nil {
			err = fmt.Errorf("stop envoy: %w", serr)
		}
		return at.Sub(p.Started()), err
	}

	// One start of each first, untimed: it pages the binaries in.
	if _, err := bareOnce(); err != nil {
		return nil, fmt.Errorf("warm-up start of bare envoy: %w", err)
	}
	if _, err := agentOnce(); err != nil {
		return nil, fmt.Errorf("warm-up start of the agent: %w", err)
	}
	var agent, bare []time.Duration
	for i := range b.o.starts {
		order := []func() (time.Duration, error){agentOnce, bareOnce}
		if i%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for j, f := range order {
			d, err := f()
			if err != nil {
				return nil, fmt.Errorf("start %d: %w", i+1, err)
			}
			if (j == 0) == (i%2 == 0) {
				agent = append(agent, d)
			} else {
				bare = append(bare, d)
			}
		}
	}
	// A few more agent starts with the 1ms probe: how long after Envoy
	// was LIVE the agent sent READY=1.
	var gaps, probed []time.Duration
	for range probeStarts {
		d, gap, err := agentStart(true)
		if err != nil {
			return nil, fmt.Errorf("probed start: %w", err)
		}
		probed, gaps = append(probed, d), append(gaps, gap)
	}
	r := &StartResult{
		ProbeStarts:   probeStarts,
		ProbeTotal:    dist(probed),
		ProbeGap:      dist(gaps),
		Starts:        b.o.starts,
		Agent:         dist(agent),
		Baseline:      dist(bare),
		AgentPollNote: "the agent polls /ready 2ms apart for its first 3s, then up to 50ms apart",
	}
	for _, d := range agent {
		r.AgentMs = append(r.AgentMs, ms(d))
	}
	for _, d := range bare {
		r.BaselineMs = append(r.BaselineMs, ms(d))
	}
	r.MedianDiffMs = round3(r.Agent.Median - r.Baseline.Median)
	r.MaxDiffMs = round3(r.Agent.Max - r.Baseline.Max)
	b.logf("start: agent median %.1fms, bare envoy median %.1fms", r.Agent.Median, r.Baseline.Median)
	return r, nil
}
