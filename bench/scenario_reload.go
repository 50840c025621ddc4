package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/childenv"
	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

const (
	bucket       = 100 * time.Millisecond // the picture's time slice
	reloadWarmup = time.Second            // load before the first change
	reloadTail   = 1500 * time.Millisecond
	reloadGap    = 2500 * time.Millisecond // pause after each change: longer than parent_shutdown_duration
	changeLimit  = 30 * time.Second        // one reload or restart
)

// errNoReload is a reload command the agent does not have (yet).
var errNoReload = errors.New("reload not available")

// scenarioReload is scenario 2: a fixed-rate keep-alive load through Envoy
// while its config changes o.reloads times: by `envoy-agent reload` (a hot
// restart) against stopping and starting a bare Envoy.
func (b *bench) scenarioReload(ctx context.Context) (*ReloadResult, error) {
	r := &ReloadResult{Workers: b.o.workers, RateRPS: b.o.rate, BucketMs: int(bucket / time.Millisecond), GapMs: ms(reloadGap)}
	var errs []error
	if b.agentHas(ctx, "reload") {
		side, err := b.reloadAgent(ctx)
		if errors.Is(err, errNoReload) {
			r.Agent = ReloadSide{NotAvailable: "n/a (reload not available)", Method: "envoy-agent reload"}
		} else if err != nil {
			errs = append(errs, fmt.Errorf("agent: %w", err))
		}
		if side != nil {
			r.Agent = *side
		}
	} else {
		b.logf("reload: `%s help` lists no reload command: n/a", b.agentBin)
		r.Agent = ReloadSide{NotAvailable: "n/a (reload not available)", Method: "envoy-agent reload"}
	}
	side, err := b.reloadBaseline(ctx)
	if err != nil {
		errs = append(errs, fmt.Errorf("baseline: %w", err))
	}
	if side != nil {
		r.Baseline = *side
	}
	side, err = b.reloadBareHotRestart(ctx)
	if err != nil {
		errs = append(errs, fmt.Errorf("bare hot restart: %w", err))
	}
	if side != nil {
		r.BareHotRestart = *side
	}
	return r, errors.Join(errs...)
}

// reloadAgent runs the agent and reloads it under load.
func (b *bench) reloadAgent(ctx context.Context) (*ReloadSide, error) {
	drain := quickDrain
	drain.LogLevel = "info" // its reload lines give the breakdown
	run, err := b.setupAgent(ctx, "reload-agent", agentSetup{version: "v0", drain: drain, procName: "reload-agent", ready: true})
	if err != nil {
		return nil, err
	}
	defer run.close(ctx)
	p := run.p
	reload := func(ctx context.Context) error {
		_, err := b.agentReload(ctx, run)
		return err
	}
	side, err := b.changeUnderLoad(ctx, "envoy-agent reload (hot restart)", run.site, reload)
	if side != nil {
		if hwm, herr := statusKiB(p.pid(), "VmHWM"); herr == nil {
			side.AgentHWMKiB = hwm
		}
		side.Steps = reloadSteps(p.logPath)
	}
	return side, err
}

// agentReload runs `envoy-agent reload` for the run's agent and returns
// its answer.
func (b *bench) agentReload(ctx context.Context, run *agentRun) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, changeLimit)
	defer cancel()
	out, err := exec.CommandContext(cctx, b.agentBin, "reload", "--config", run.cfgPath).CombinedOutput()
	text := strings.TrimSpace(string(out))
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 2 && strings.Contains(text, "unknown command") {
			return text, errNoReload
		}
		return text, fmt.Errorf("envoy-agent reload: %w: %s", err, firstLines(text, 3))
	}
	if run.p.exitedEarly() {
		return text, run.p.failure(fmt.Errorf("the agent exited during the reload: %v", run.p.Err()))
	}
	return text, nil
}

// reloadStepKeys are the fields of the agent's "reloaded" log line that
// time its parts (service/reload.go), in order: a reload in place has
// in_place_ms (its files until Envoy took them) instead of hot_restart_ms.
var reloadStepKeys = []string{"load_ms", "copy_ms", "validate_ms", "versions_ms", "plan_ms", "hot_restart_ms", "in_place_ms", "took_ms"}

// reloadSteps reads the agent's log for its successful reloads and sums up
// how long each part took.
func reloadSteps(logPath string) map[string]Dist {
	return reloadStepsSince(logPath, 0)
}

// reloadStepsSince is reloadSteps of the log from byte offset on.
func reloadStepsSince(logPath string, offset int64) map[string]Dist {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return nil
	}
	b = b[min(offset, int64(len(b))):]
	got := map[string][]time.Duration{}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, "event=reload ") || !strings.Contains(line, "ok=true") {
			continue
		}
		for _, f := range strings.Fields(line) {
			k, v, ok := strings.Cut(f, "=")
			if !ok || !slices.Contains(reloadStepKeys, k) {
				continue
			}
			if x, err := strconv.ParseFloat(v, 64); err == nil {
				got[k] = append(got[k], time.Duration(x*float64(time.Millisecond)))
			}
		}
	}
	out := map[string]Dist{}
	for k, ds := range got {
		out[k] = dist(ds)
	}
	return out
}

// reloadBareHotRestart is the floor of a reload: what the agent's safety
// needs Envoy itself to do, by hand, under the same load. Each change runs
// a bare `envoy --mode validate` on the bootstrap (as the agent runs it),
// then execs epoch N+1 with the same base id and waits until /server_info
// says epoch N+1 is LIVE (1 ms polls).
func (b *bench) reloadBareHotRestart(ctx context.Context) (*ReloadSide, error) {
	s, err := b.newSite("reload-hot", "v0", 1, 0)
	if err != nil {
		return nil, err
	}
	base := b.baseID()
	drain, parent := strconv.Itoa(int(quickDrain.DrainDuration.Seconds())), strconv.Itoa(int(quickDrain.ParentShutdown.Seconds()))
	start := func(epoch int) (*proc, error) {
		args := append(envoykit.BareArgs(s.bootPath, base), "--restart-epoch", strconv.Itoa(epoch),
			"--drain-time-s", drain, "--parent-shutdown-time-s", parent, "--drain-strategy", "immediate")
		return b.sp.start(fmt.Sprintf("reload-hot-%d", epoch), b.logPath("reload-hot"), childenv.Clean(os.Environ()), b.envoyBin, args...)
	}
	p, err := start(0)
	if err != nil {
		return nil, err
	}
	procs := []*proc{p}
	defer func() {
		for _, p := range procs {
			p.Kill()
		}
	}()
	if _, err := pollServerInfo(ctx, p, s.admin, 0, time.Millisecond, startTimeout); err != nil {
		return nil, err
	}
	var validates, restarts []time.Duration
	epoch := 0
	change := func(ctx context.Context) error {
		t := time.Now()
		vctx, cancel := context.WithTimeout(ctx, changeLimit)
		out, err := exec.CommandContext(vctx, b.envoyBin, "--mode", "validate", "-c", s.bootPath, "-l", "warning", "--disable-hot-restart").CombinedOutput()
		cancel()
		if err != nil {
			return fmt.Errorf("envoy --mode validate: %w: %s", err, firstLines(strings.TrimSpace(string(out)), 3))
		}
		validates = append(validates, time.Since(t))
		epoch++
		p, err := start(epoch)
		if err != nil {
			return err
		}
		procs = append(procs, p)
		at, err := pollServerInfo(ctx, p, s.admin, epoch, time.Millisecond, changeLimit)
		if err != nil {
			return err
		}
		restarts = append(restarts, at.Sub(p.Started()))
		return nil
	}
	side, err := b.changeUnderLoad(ctx, "bare envoy --mode validate, then epoch N+1 by hand", s, change)
	if side != nil {
		vd, hd := dist(validates), dist(restarts)
		side.ValidateMs, side.HotRestartMs = &vd, &hd
	}
	return side, err
}

// reloadBaseline runs a bare Envoy and restarts it under load, as a plain
// unit's restart does: SIGTERM, wait for the exit, start again.
func (b *bench) reloadBaseline(ctx context.Context) (*ReloadSide, error) {
	s, p, err := b.setupEnvoy("reload-envoy", "reload-envoy", "v0", 1)
	if err != nil {
		return nil, err
	}
	defer func() { p.Kill() }()
	if _, err := pollReady(ctx, p, s.admin, time.Millisecond, startTimeout); err != nil {
		return nil, err
	}
	restart := func(ctx context.Context) error {
		if err := p.stop(ctx, 10*time.Second); err != nil {
			return err
		}
		np, err := b.startEnvoy("reload-envoy", s.bootPath)
		if err != nil {
			return err
		}
		p = np
		_, err = pollReady(ctx, p, s.admin, time.Millisecond, changeLimit)
		return err
	}
	return b.changeUnderLoad(ctx, "SIGTERM, wait for the exit, start", s, restart)
}

// changeUnderLoad runs the load through the site's listener, and o.reloads
// times rewrites the site's bootstrap with a new x-config-version and calls
// change.
func (b *bench) changeUnderLoad(ctx context.Context, method string, s *site, change func(context.Context) error) (*ReloadSide, error) {
	listener := s.listener()
	if code, _, err := get(ctx, oneShot(2*time.Second), localURL(listener, "/")); err != nil || code != 200 {
		return nil, fmt.Errorf("envoy does not proxy before the load: status %d, %v", code, err)
	}
	limit := reloadWarmup + reloadTail + time.Duration(b.o.reloads)*(reloadGap+changeLimit)
	l := b.startLoad(listener, limit)
	side := &ReloadSide{Available: true, Method: method, Changes: b.o.reloads, VersionsWant: b.o.reloads + 1}
	var changeDs []time.Duration
	var err error
	sleep(ctx, reloadWarmup)
	for i := 1; i <= b.o.reloads && ctx.Err() == nil; i++ {
		s.boot.ResponseHeader = fmt.Sprintf("v%d", i)
		if err = s.writeBootstrap(); err != nil {
			break
		}
		t := time.Now()
		cerr := change(ctx)
		d := time.Since(t)
		ev := Event{StartMs: ms(t.Sub(l.Start())), EndMs: ms(time.Since(l.Start())), OK: cerr == nil}
		if cerr != nil {
			ev.Error = cerr.Error()
			b.logf("reload %d (%s): %v", i, method, cerr)
			if errors.Is(cerr, errNoReload) {
				err = cerr
				break
			}
		} else {
			side.ChangesOK++
			changeDs = append(changeDs, d)
		}
		side.Events = append(side.Events, ev)
		sleep(ctx, reloadGap)
	}
	sleep(ctx, reloadTail)
	samples := l.Stop()
	side.LoadMs = ms(time.Since(l.Start()))
	side.Load = loadStats(samples)
	side.ChangeMs = dist(changeDs)
	side.VersionsSeen = len(side.Load.Versions)
	side.Buckets = buckets(samples, bucket)
	b.logf("reload (%s): %d/%d changes ok, %d sent, %d failed", method, side.ChangesOK, side.Changes, side.Load.Sent, side.Load.Failed)
	if errors.Is(err, errNoReload) {
		return nil, err
	}
	if err == nil && ctx.Err() != nil {
		err = fmt.Errorf("cut short: %w", ctx.Err())
	}
	return side, err
}

// loadStats sums samples up.
func loadStats(samples []envoykit.Sample) LoadStats {
	s := LoadStats{FailedBy: map[string]int{}, Versions: map[string]int{}}
	lats := make([]time.Duration, 0, len(samples))
	for _, x := range samples {
		s.Sent++
		lats = append(lats, x.Latency)
		if x.OK {
			s.OK++
			if x.Version != "" {
				s.Versions[x.Version]++
			}
		} else {
			s.Failed++
			s.FailedBy[x.Err]++
		}
	}
	s.Latency = dist(lats)
	return s
}

// buckets counts outcomes per slice of send time.
func buckets(samples []envoykit.Sample, width time.Duration) []Bucket {
	if len(samples) == 0 {
		return nil
	}
	out := make([]Bucket, int(samples[len(samples)-1].At/width)+1)
	for _, x := range samples {
		i := int(x.At / width)
		if x.OK {
			out[i].OK++
		} else {
			out[i].Failed++
		}
	}
	return out
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func firstLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, " / ")
}
