package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"time"
)

// scenarioOverhead is scenario 4: the agent process alone (not its Envoy)
// over an idle period with the watchdog on: peak RSS, CPU, binary size. Its
// Envoy is measured beside it for scale.
func (b *bench) scenarioOverhead(ctx context.Context) (*OverheadResult, error) {
	run, err := b.setupAgent(ctx, "overhead", agentSetup{version: "idle", drain: quickDrain,
		procName: "overhead-agent", env: []string{"WATCHDOG_USEC=2000000"}, ready: true})
	if err != nil {
		return nil, err
	}
	defer run.close(ctx)
	p, ns := run.p, run.ns
	sleep(ctx, 2*time.Second) // let start-up settle
	kids := children(p.pid())
	if len(kids) != 1 {
		return nil, fmt.Errorf("the agent (pid %d) has %d children, want its one Envoy", p.pid(), len(kids))
	}
	envoyPid := kids[0]

	a0, at0, e0, err := cpuTimes(p.pid(), envoyPid)
	if err != nil {
		return nil, err
	}
	from := time.Now()
	b.logf("overhead: agent pid %d, envoy pid %d idle for %s", p.pid(), envoyPid, b.o.idle)
	sleep(ctx, b.o.idle)
	if ctx.Err() != nil {
		return nil, fmt.Errorf("idle period: %w", ctx.Err())
	}
	to := time.Now()
	if p.exitedEarly() {
		return nil, p.failure(fmt.Errorf("the agent exited during the idle period (%s after it began): %v", p.Exited().Sub(from).Round(time.Millisecond), p.Err()))
	}
	a1, at1, e1, err := cpuTimes(p.pid(), envoyPid)
	if err != nil {
		return nil, err
	}
	span := to.Sub(from)
	r := &OverheadResult{
		IdleS:             math.Round(span.Seconds()*10) / 10,
		AgentCPUSeconds:   round6((a1 - a0).Seconds()),
		AgentCPUTicksSecs: round6((at1 - at0).Seconds()),
		EnvoyCPUSeconds:   round6((e1 - e0).Seconds()),
		WatchdogPings:     ns.Count("WATCHDOG=1", from, to),
		AgentThreads:      threads(p.pid()),
	}
	r.AgentCPUPercent = round6(100 * (a1 - a0).Seconds() / span.Seconds())
	r.EnvoyCPUPercent = round6(100 * (e1 - e0).Seconds() / span.Seconds())
	if r.AgentHWMKiB, err = statusKiB(p.pid(), "VmHWM"); err != nil {
		return nil, err
	}
	if r.AgentRSSKiB, err = statusKiB(p.pid(), "VmRSS"); err != nil {
		return nil, err
	}
	if r.EnvoyHWMKiB, err = statusKiB(envoyPid, "VmHWM"); err != nil {
		return nil, err
	}
	for bin, size := range map[string]*int64{b.agentBin: &r.AgentBinaryBytes, b.envoyBin: &r.EnvoyBinaryBytes} {
		fi, err := os.Stat(bin)
		if err != nil {
			return nil, fmt.Errorf("binary size: %w", err)
		}
		*size = fi.Size()
	}
	b.logf("overhead: agent VmHWM %d KiB, %.4fs CPU in %.1fs, %d watchdog pings", r.AgentHWMKiB, r.AgentCPUSeconds, r.IdleS, r.WatchdogPings)
	return r, nil
}

// cpuTimes is the CPU time so far of the agent (from schedstat and in
// ticks) and of its Envoy (in ticks).
func cpuTimes(agentPid, envoyPid int) (agent, agentTicks, envoy time.Duration, err error) {
	if agent, err = cpuSched(agentPid); err != nil {
		return 0, 0, 0, err
	}
	if agentTicks, err = cpuTicks(agentPid); err != nil {
		return 0, 0, 0, err
	}
	if envoy, err = cpuTicks(envoyPid); err != nil {
		return 0, 0, 0, err
	}
	return agent, agentTicks, envoy, nil
}

func round6(x float64) float64 { return math.Round(x*1e6) / 1e6 }
