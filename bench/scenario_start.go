package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// startTimeout bounds one start in the start scenario.
const startTimeout = 30 * time.Second

// probeStarts are the extra agent starts that tell the agent's part apart.
const probeStarts = 6

// scenarioStart is scenario 1: from exec to ready, the agent (READY=1 on
// its notify socket) against a bare Envoy (/ready polled every 1ms) and,
// with -launcher, the floor (bench/launcher to its READY=1). They take
// turns, so that a noisy neighbour hurts all alike.
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
	agentOnce := func() (time.Duration, error) { return b.timeAgentStart(ctx, run, "start-agent") }
	bareOnce := func() (time.Duration, error) { return b.timeBareStart(ctx, "start-envoy", run.bootPath, run.admin) }

	// The floor: the least a Go supervisor does (bench/launcher), on the
	// bare Envoy's command line, until its READY=1.
	floorOnce := func() (time.Duration, error) {
		mark := ns.Mark()
		args := append([]string{strconv.Itoa(run.admin), b.envoyBin}, envoykit.BareArgs(run.bootPath, b.baseID())...)
		p, err := b.sp.start("start-floor", b.logPath("start-floor"), []string{"NOTIFY_SOCKET=" + ns.Path}, b.o.launcherBin, args...)
		if err != nil {
			return 0, err
		}
		at, err := waitNotify(ctx, ns, p, "READY=1", mark, startTimeout)
		if serr := p.stop(ctx, 10*time.Second); err == nil && serr != nil {
			err = fmt.Errorf("stop the floor launcher: %w", serr)
		}
		return at.Sub(p.Started()), err
	}
	type side struct {
		name  string
		start func() (time.Duration, error)
		times []time.Duration
	}
	sides := []*side{{name: "the agent", start: agentOnce}, {name: "bare envoy", start: bareOnce}}
	floor := &side{name: "the floor launcher", start: floorOnce}
	if b.o.launcherBin != "" {
		sides = append(sides, floor)
	}

	// One start of each first, untimed: it pages the binaries in.
	for _, sd := range sides {
		if _, err := sd.start(); err != nil {
			return nil, fmt.Errorf("warm-up start of %s: %w", sd.name, err)
		}
	}
	// Each round starts every side once, the order rotating, so that a
	// noisy neighbour hurts all alike.
	for i := range b.o.starts {
		for j := range sides {
			sd := sides[(i+j)%len(sides)]
			d, err := sd.start()
			if err != nil {
				return nil, fmt.Errorf("start %d of %s: %w", i+1, sd.name, err)
			}
			sd.times = append(sd.times, d)
		}
	}
	agent, bare := sides[0].times, sides[1].times
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
		Floor:         dist(floor.times),
		AgentMs:       msAll(agent),
		BaselineMs:    msAll(bare),
		FloorMs:       msAll(floor.times),
		AgentPollNote: "the agent polls /ready 2ms apart for its first 3s, then up to 50ms apart",
	}
	r.MedianDiffMs = round3(r.Agent.Median - r.Baseline.Median)
	r.MaxDiffMs = round3(r.Agent.Max - r.Baseline.Max)
	b.logf("start: agent median %.1fms, bare envoy median %.1fms", r.Agent.Median, r.Baseline.Median)
	return r, nil
}

// timeAgentStart starts the run's agent once (its process and log called
// name), waits for its READY=1, quits it, and returns exec to READY=1.
func (b *bench) timeAgentStart(ctx context.Context, run *agentRun, name string) (time.Duration, error) {
	if err := run.writeConfig(b); err != nil {
		return 0, err
	}
	mark := run.ns.Mark()
	p, err := b.startAgentRun(run, name)
	if err != nil {
		return 0, err
	}
	at, err := waitNotify(ctx, run.ns, p, "READY=1", mark, startTimeout)
	if qerr := quitAgent(ctx, p, run.controlSocket()); err == nil && qerr != nil {
		err = fmt.Errorf("stop the agent: %w", qerr)
	}
	return at.Sub(p.Started()), err
}

// timeBareStart starts a bare Envoy on bootPath once (called name), waits
// for its /ready (1 ms polls), stops it, and returns exec to /ready 200.
func (b *bench) timeBareStart(ctx context.Context, name, bootPath string, admin int) (time.Duration, error) {
	p, err := b.startEnvoy(name, bootPath)
	if err != nil {
		return 0, err
	}
	at, err := pollReady(ctx, p, admin, time.Millisecond, startTimeout)
	if serr := p.stop(ctx, 10*time.Second); err == nil && serr != nil {
		err = fmt.Errorf("stop envoy: %w", serr)
	}
	return at.Sub(p.Started()), err
}
