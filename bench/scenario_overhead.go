package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"
)

// scenarioOverhead is scenario 4: the agent process alone (not its Envoy)
// over an idle period with the watchdog on: peak RSS, CPU, binary size. Its
// Envoy is measured beside it for scale.
func (b *bench) scenarioOverhead(ctx context.Context) (*OverheadResult, error) {
	dir, err := b.dir("overhead")
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	admin, listener, status := ports[0], ports[1], ports[2]
	bootPath := filepath.Join(dir, "envoy.yaml")
	if err := (bootstrap{AdminPort: admin, ListenerPorts: []int{listener}, UpstreamPort: b.up.port, Version: "idle"}).write(bootPath); err != nil {
		return nil, err
	}
	cfg := agentConfig{EnvoyBin: b.envoyBin, BootstrapPath: bootPath, AdminPort: admin, StatusPort: status, BaseID: newBaseID(),
		DrainDuration: time.Second, ParentShutdown: 2 * time.Second, TerminationDrain: time.Second, MinDrain: 0,
		RunDir: filepath.Join(dir, "run")}
	cfgPath := filepath.Join(dir, "agent.toml")
	if err := cfg.write(cfgPath); err != nil {
		return nil, err
	}
	ns, err := listenNotify(dir)
	if err != nil {
		return nil, err
	}
	defer ns.close()
	p, err := b.startAgent("overhead-agent", cfgPath, "NOTIFY_SOCKET="+ns.path, "WATCHDOG_USEC=2000000")
	if err != nil {
		return nil, err
	}
	defer func() { _ = quitAgent(context.WithoutCancel(ctx), p, status) }()
	if _, err := ns.waitFor(ctx, p, "READY=1", 0, startTimeout); err != nil {
		return nil, err
	}
	sleep(ctx, 2*time.Second) // let start-up settle
	kids := children(p.pid())
	if len(kids) != 1 {
		return nil, fmt.Errorf("the agent (pid %d) has %d children, want its one Envoy", p.pid(), len(kids))
	}
	envoyPid := kids[0]

	a0, err := cpuSched(p.pid())
	if err != nil {
		return nil, err
	}
	at0, err := cpuTicks(p.pid())
	if err != nil {
		return nil, err
	}
	e0, err := cpuTicks(envoyPid)
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
		return nil, p.failure(fmt.Errorf("the agent exited during the idle period (%s after it began): %v", p.exited.Sub(from).Round(time.Millisecond), p.err))
	}
	a1, err := cpuSched(p.pid())
	if err != nil {
		return nil, err
	}
	at1, err := cpuTicks(p.pid())
	if err != nil {
		return nil, err
	}
	e1, err := cpuTicks(envoyPid)
	if err != nil {
		return nil, err
	}
	span := to.Sub(from)
	r := &OverheadResult{
		IdleS:             math.Round(span.Seconds()*10) / 10,
		AgentCPUSeconds:   round6((a1 - a0).Seconds()),
		AgentCPUTicksSecs: round6((at1 - at0).Seconds()),
		EnvoyCPUSeconds:   round6((e1 - e0).Seconds()),
		WatchdogPings:     ns.count("WATCHDOG=1", from, to),
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

func round6(x float64) float64 { return math.Round(x*1e6) / 1e6 }
