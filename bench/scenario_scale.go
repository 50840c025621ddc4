package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// scenarioScale is scenario 7: the agent at scale, each part beside a
// bare Envoy doing the same. -scale-certs file-named certificates (SNI,
// one per filter chain): the start until every name is served, and a
// renewal of one; -scale-listeners HTTP listeners: a route edit of the
// first, a middle and the last, under a load that does not retry; and the
// small bootstrap's start, taking turns with a bare Envoy. A part that
// fails (the agent's Envoy aborting, say) is recorded and the others run.
func (b *bench) scenarioScale(ctx context.Context) (*ScaleResult, error) {
	r := &ScaleResult{}
	var errs []error
	if b.o.scaleCerts > 0 {
		var err error
		if r.Certs, err = b.scaleCerts(ctx, b.o.scaleCerts, b.o.scaleCertStarts); err != nil {
			errs = append(errs, fmt.Errorf("certificates: %w", err))
		}
	}
	if b.o.scaleHTTPListeners > 0 && ctx.Err() == nil {
		var err error
		if r.Listeners, err = b.scaleListeners(ctx, b.o.scaleHTTPListeners); err != nil {
			errs = append(errs, fmt.Errorf("listeners: %w", err))
		}
	}
	if ctx.Err() == nil {
		var err error
		if r.SmallStart, err = b.scaleSmallStart(ctx, b.o.scaleStartRuns, b.o.scaleStartsPerRun); err != nil {
			r.SmallStart.Error = err.Error()
			errs = append(errs, fmt.Errorf("small start: %w", err))
		}
	}
	return r, errors.Join(errs...)
}

// scaleSmallStart times the small bootstrap's start, agent (exec to
// READY=1) against bare Envoy (exec to /ready 200), taking turns: runs runs
// of perRun starts each, as the targets were measured.
func (b *bench) scaleSmallStart(ctx context.Context, runs, perRun int) (ScaleStart, error) {
	r := ScaleStart{Runs: runs, PerRun: perRun}
	run, err := b.setupAgent(ctx, "scale-start", agentSetup{version: "start", drain: quickDrain})
	if err != nil {
		return r, err
	}
	defer run.ns.Close()
	// One of each first, untimed: it pages the binaries in.
	if _, err := b.timeAgentStart(ctx, run, "scale-start-agent"); err != nil {
		return r, err
	}
	if _, err := b.timeBareStart(ctx, "scale-start-envoy", run.bootPath, run.admin); err != nil {
		return r, err
	}
	var agent, bare []time.Duration
	for i := range runs {
		var ra, rb []time.Duration
		for j := range perRun {
			// Alternate which goes first, so that neither always follows the other.
			order := []bool{true, false}
			if (i+j)%2 == 1 {
				order = []bool{false, true}
			}
			for _, agentTurn := range order {
				var d time.Duration
				if agentTurn {
					d, err = b.timeAgentStart(ctx, run, "scale-start-agent")
				} else {
					d, err = b.timeBareStart(ctx, "scale-start-envoy", run.bootPath, run.admin)
				}
				if err != nil {
					return r, fmt.Errorf("run %d, start %d: %w", i+1, j+1, err)
				}
				if agentTurn {
					ra = append(ra, d)
				} else {
					rb = append(rb, d)
				}
			}
		}
		r.RunRatios = append(r.RunRatios, round3(dist(ra).Median/dist(rb).Median))
		agent, bare = append(agent, ra...), append(bare, rb...)
	}
	r.Agent, r.Bare = dist(agent), dist(bare)
	b.logf("scale: small start, agent median %.1f ms, bare %.1f ms, run ratios %v", r.Agent.Median, r.Bare.Median, r.RunRatios)
	return r, nil
}

// whyExited is what an agent's log, from byte offset since on, says of
// why it ended: its last "envoy-agent:" line (without the Envoy lines it
// quotes) with the problem lines under it, and Envoy's assert that aborted
// it, instead of the warnings its log starts with.
func whyExited(p *proc, since int64, err error) error {
	lines := strings.Split(readFrom(p.logPath, since), "\n")
	var agent, asserts []string
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "envoy-agent:"):
			first, _, _ := strings.Cut(l, "; Envoy's last log lines")
			agent = []string{first}
			for _, m := range lines[i+1:] {
				if !strings.HasPrefix(m, "  ") || len(agent) > 3 {
					break
				}
				agent = append(agent, strings.TrimSpace(m))
			}
		case strings.Contains(l, "assert failure") && len(asserts) == 0:
			asserts = append(asserts, l)
		}
	}
	why := append(agent, asserts...)
	if len(why) == 0 {
		return err
	}
	if p.Running() {
		return fmt.Errorf("%w; its log: %s", err, strings.Join(why, " / "))
	}
	return fmt.Errorf("%s exited (%v): %s", p.name, p.Err(), strings.Join(why, " / "))
}

// medianOf is the median of xs (0 for none).
func medianOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}
