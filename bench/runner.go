package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// scenario is one measurement; it fills its part of Results.
type scenario struct {
	name    string
	timeout time.Duration
	run     func(ctx context.Context, b *bench, r *Results) error
}

var scenarios = []scenario{
	{"start", 90 * time.Second, func(ctx context.Context, b *bench, r *Results) (err error) {
		r.Start, err = b.scenarioStart(ctx)
		return err
	}},
	{"reload", 200 * time.Second, func(ctx context.Context, b *bench, r *Results) (err error) {
		r.Reload, err = b.scenarioReload(ctx)
		return err
	}},
	{"stop", 90 * time.Second, func(ctx context.Context, b *bench, r *Results) (err error) {
		r.Stop, err = b.scenarioStop(ctx)
		return err
	}},
	{"overhead", 90 * time.Second, func(ctx context.Context, b *bench, r *Results) (err error) {
		r.Overhead, err = b.scenarioOverhead(ctx)
		return err
	}},
	{"growth", 120 * time.Second, func(ctx context.Context, b *bench, r *Results) (err error) {
		r.Growth, err = b.scenarioGrowth(ctx)
		return err
	}},
	{"inplace", 240 * time.Second, func(ctx context.Context, b *bench, r *Results) (err error) {
		r.InPlace, err = b.scenarioInPlace(ctx)
		return err
	}},
	{"scale", 900 * time.Second, func(ctx context.Context, b *bench, r *Results) (err error) {
		r.Scale, err = b.scenarioScale(ctx)
		return err
	}},
}

// runAll sets the bench up and runs the chosen scenarios one after another;
// a scenario that fails is recorded in Results.Errors and the others still run.
func runAll(ctx context.Context, o options, progress io.Writer) (*Results, error) {
	b := &bench{o: o, progress: progress, t0: time.Now()}
	var err error
	if b.agentBin, err = filepath.Abs(o.agentBin); err != nil {
		return nil, fmt.Errorf("agent binary: %w", err)
	}
	if _, err := os.Stat(b.agentBin); err != nil {
		return nil, fmt.Errorf("agent binary (run `make build`): %w", err)
	}
	if b.envoyBin, err = envoykit.FindEnvoy(o.envoyBin); err != nil {
		return nil, err
	}
	if b.work, err = os.MkdirTemp("", "envoy-agent-bench-"); err != nil {
		return nil, fmt.Errorf("work folder: %w", err)
	}
	if o.keepWorkDir {
		b.logf("work folder: %s", b.work)
	} else {
		defer os.RemoveAll(b.work)
	}
	b.logDir = filepath.Join(o.outDir, "logs")
	_ = os.RemoveAll(b.logDir)
	if err := os.MkdirAll(b.logDir, 0o755); err != nil {
		return nil, fmt.Errorf("log folder: %w", err)
	}
	b.sp = newProcs()
	defer b.removeSharedMemory()
	defer b.sp.killAll()
	if b.up, err = envoykit.StartUpstream(); err != nil {
		return nil, err
	}
	defer b.up.Close()

	r := &Results{
		Date: time.Now().UTC().Format(time.RFC3339),
		Host: Host{
			Cores:         runtime.NumCPU(),
			LoadAvgBefore: loadAvg(),
			Go:            runtime.Version(),
			Envoy:         version(ctx, b.envoyBin, "--version"),
			Agent:         version(ctx, b.agentBin, "version"),
			AgentBinary:   b.agentBin,
			EnvoyBinary:   b.envoyBin,
		},
		Errors: map[string]string{},
	}
	want := map[string]bool{}
	for _, s := range strings.Split(o.scenarioList, ",") {
		want[strings.TrimSpace(s)] = true
	}
	b.logf("envoy %s, agent %s, %d cores, load average %s", r.Host.Envoy, r.Host.Agent, r.Host.Cores, r.Host.LoadAvgBefore)
	for _, s := range scenarios {
		if !want[s.name] {
			continue
		}
		if ctx.Err() != nil {
			r.Errors[s.name] = fmt.Sprintf("not run: %v", ctx.Err())
			continue
		}
		b.logf("scenario %s", s.name)
		sctx, cancel := context.WithTimeout(ctx, s.timeout)
		err := s.run(sctx, b, r)
		cancel()
		b.sp.killAll() // nothing a scenario started outlives it
		if err != nil {
			b.logf("scenario %s failed: %v", s.name, err)
			r.Errors[s.name] = err.Error()
		}
	}
	r.Host.LoadAvgAfter = loadAvg()
	r.Host.Seconds = time.Since(b.t0).Round(100 * time.Millisecond).Seconds()
	return r, nil
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
