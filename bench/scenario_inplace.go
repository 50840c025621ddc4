package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

const (
	// idleHeader is the unchanged listeners' x-config-version.
	idleHeader = "unchanged"
	// rssEvery is how often the serving Envoys' RSS is sampled.
	rssEvery = 10 * time.Millisecond
	// scaleReloads is how many reloads each path makes at scale (at most
	// -reloads).
	scaleReloads = 3
)

// idlePauses are the pauses of the workers that keep a connection each to
// the listener the edit does not change: longer than
// parent_shutdown_duration, so that a hot restart's old epoch can exit
// under them, and each its own, so that their requests fall at every phase
// of the reload cycle (workers in step with the reloads would always ask
// during a drain, be answered with Connection: close, and never fail).
var idlePauses = []time.Duration{2200 * time.Millisecond, 2400 * time.Millisecond, 2600 * time.Millisecond,
	2800 * time.Millisecond, 3000 * time.Millisecond, 3200 * time.Millisecond}

// scenarioInPlace is scenario 6: the agent's reload of the same edit (the
// first listener's route) by hot restart (reload_method = "hot_restart")
// and in place (reload_method = "auto", the default), o.reloads times
// each, under the reload scenario's load on that listener, with idle
// keep-alive connections to another one; then, with o.scaleListeners
// listeners, the same edit timed both ways.
func (b *bench) scenarioInPlace(ctx context.Context) (*InPlaceResult, error) {
	r := &InPlaceResult{Workers: b.o.workers, RateRPS: b.o.rate, IdlePausesMs: msAll(idlePauses),
		GapMs: ms(reloadGap), ParentShutdownMs: ms(quickDrain.ParentShutdown), DrainMs: ms(quickDrain.DrainDuration)}
	if !b.agentHas(ctx, "reload") {
		return r, fmt.Errorf("`%s help` lists no reload command", b.agentBin)
	}
	var errs []error
	for _, side := range []struct {
		method string
		out    *InPlaceSide
	}{{"hot_restart", &r.HotRestart}, {"auto", &r.InPlace}} {
		got, err := b.inPlaceUnderLoad(ctx, side.method)
		if got != nil {
			*side.out = *got
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", methodName(side.method), err))
		}
	}
	if b.o.scaleListeners > 0 && ctx.Err() == nil {
		for _, side := range []struct {
			method string
			out    *InPlaceScaleSide
		}{{"hot_restart", &r.ScaleHotRestart}, {"auto", &r.ScaleInPlace}} {
			got, err := b.inPlaceAtScale(ctx, side.method, b.o.scaleListeners)
			if got != nil {
				*side.out = *got
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%d listeners, %s: %w", b.o.scaleListeners, methodName(side.method), err))
			}
		}
	}
	return r, errors.Join(errs...)
}

// methodName is how the table names a reload_method.
func methodName(method string) string {
	if method == "auto" {
		return `in place (reload_method = "auto", the default)`
	}
	return `hot restart (reload_method = "hot_restart")`
}

// inPlaceAgent starts an agent with that reload_method on a site of
// listeners listeners, the first with x-config-version v0, the others
// idleHeader, and returns it once it sent READY=1 with how long that took
// from its exec.
func (b *bench) inPlaceAgent(ctx context.Context, name, method string, listeners int) (*agentRun, time.Duration, error) {
	drain := quickDrain
	drain.LogLevel = "info" // its reload lines give the breakdown
	drain.ReloadMethod = method
	run, err := b.setupAgent(ctx, name, agentSetup{version: "v0", drain: drain, listeners: listeners, extraHeader: idleHeader})
	if err != nil {
		return nil, 0, err
	}
	if err := run.writeConfig(b); err != nil {
		run.close(ctx)
		return nil, 0, err
	}
	t := time.Now()
	if _, err := b.startAgentRun(run, name); err != nil {
		run.close(ctx)
		return nil, 0, err
	}
	if err := run.waitReady(ctx); err != nil {
		run.close(ctx)
		return nil, 0, err
	}
	return run, time.Since(t), nil
}

// wantAnswer is what `envoy-agent reload` says when it took method's path.
func wantAnswer(method string) string {
	if method == "auto" {
		return "reloaded in place: routes updated ingress/0/0; epoch 0 keeps serving"
	}
	return "reloaded: epoch "
}

// inPlaceUnderLoad runs the agent with reload_method method and reloads the
// first listener's route under load, with idle keep-alive connections to
// the second listener and the serving Envoys' RSS sampled.
func (b *bench) inPlaceUnderLoad(ctx context.Context, method string) (*InPlaceSide, error) {
	name := "inplace-hot"
	if method == "auto" {
		name = "inplace-auto"
	}
	run, _, err := b.inPlaceAgent(ctx, name, method, 2)
	if err != nil {
		return nil, err
	}
	defer run.close(ctx)
	other := run.listeners[1]
	limit := reloadWarmup + reloadTail + time.Duration(b.o.reloads)*(reloadGap+changeLimit)
	var workers []envoykit.Workers
	for _, pause := range idlePauses {
		workers = append(workers, envoykit.Workers{N: 1, Path: "/", Idle: pause})
	}
	idle := envoykit.StartLoad(envoykit.LoadOptions{URL: localURL(other, "/"), Client: envoykit.RawHTTP1,
		Workers: workers, Duration: limit, Timeout: 2 * time.Second})
	defer idle.Stop()
	rss := startRSSSampler(run.p.pid(), rssEvery)
	defer rss.stop()

	out := &InPlaceSide{ReloadMethod: method}
	var firstChange time.Time
	reload := func(ctx context.Context) error {
		if firstChange.IsZero() {
			firstChange = time.Now()
		}
		answer, err := b.agentReload(ctx, run)
		if err != nil {
			return err
		}
		if strings.Contains(answer, wantAnswer(method)) {
			out.PathTaken++
		} else if out.OtherAnswer == "" {
			out.OtherAnswer = firstLines(answer, 2)
		}
		return nil
	}
	side, err := b.changeUnderLoad(ctx, "envoy-agent reload: "+methodName(method), run.site, reload)
	idleSamples := idle.Stop()
	samples := rss.stop()
	if side == nil {
		return nil, err
	}
	out.ReloadSide = *side
	out.Buckets = nil // the picture is the reload scenario's
	out.Steps = reloadSteps(run.p.logPath)
	out.Idle = idleStats(idleSamples)
	out.EnvoyPids = len(rss.pids())
	out.SteadyRSSKiB, out.PeakRSSKiB = steadyAndPeak(samples, firstChange)
	b.logf("inplace (%s): %d/%d reloads took the path, %d envoy pids, RSS steady %d KiB, peak %d KiB; idle: %d/%d failed",
		methodName(method), out.PathTaken, out.Changes, out.EnvoyPids, out.SteadyRSSKiB, out.PeakRSSKiB, out.Idle.Failed, out.Idle.Sent)
	return out, err
}

// inPlaceAtScale runs the agent with reload_method method on a bootstrap of
// n listeners and reloads an edit of the first one's route scaleReloads
// times (at most -reloads), with no load.
func (b *bench) inPlaceAtScale(ctx context.Context, method string, n int) (*InPlaceScaleSide, error) {
	name := fmt.Sprintf("inplace-%d-hot", n)
	if method == "auto" {
		name = fmt.Sprintf("inplace-%d-auto", n)
	}
	run, started, err := b.inPlaceAgent(ctx, name, method, n)
	if err != nil {
		return nil, err
	}
	defer run.close(ctx)
	out := &InPlaceScaleSide{Listeners: n, Method: methodName(method), ReloadMethod: method, StartMs: ms(started), Changes: min(scaleReloads, b.o.reloads)}
	var took []time.Duration
	for i := 1; i <= out.Changes && ctx.Err() == nil; i++ {
		run.boot.ResponseHeader = fmt.Sprintf("v%d", i)
		if err := run.writeBootstrap(); err != nil {
			return out, err
		}
		t := time.Now()
		answer, err := b.agentReload(ctx, run)
		d := time.Since(t)
		if err != nil {
			return out, fmt.Errorf("reload %d: %w", i, err)
		}
		out.ChangesOK++
		took = append(took, d)
		if strings.Contains(answer, wantAnswer(method)) {
			out.PathTaken++
		} else if out.OtherAnswer == "" {
			out.OtherAnswer = firstLines(answer, 2)
		}
		if err := b.servesVersion(ctx, run.listener(), fmt.Sprintf("v%d", i), &out.ServedAtReturn); err != nil {
			return out, fmt.Errorf("after reload %d: %w", i, err)
		}
		sleep(ctx, reloadGap) // the hot restart's old epoch exits first
	}
	out.ChangeMs = dist(took)
	out.Steps = reloadSteps(run.p.logPath)
	b.logf("inplace: %d listeners, %s: reload median %.1f ms (%d/%d took the path)", n, methodName(method), out.ChangeMs.Median, out.PathTaken, out.Changes)
	if ctx.Err() != nil {
		return out, fmt.Errorf("cut short: %w", ctx.Err())
	}
	return out, nil
}

// servesVersion asks the listener for its x-config-version until it
// answers want (every 10 ms, at most 2 s), and counts in atOnce whether the
// first answer already was want.
func (b *bench) servesVersion(ctx context.Context, listener int, want string, atOnce *int) error {
	deadline := time.Now().Add(2 * time.Second)
	for i := 0; ; i++ {
		code, got, err := getVersion(ctx, listener)
		if err == nil && code == http.StatusOK && got == want {
			if i == 0 {
				*atOnce++
			}
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the first listener answers %d %q (%v), want %s", code, got, err, want)
		}
		sleep(ctx, 10*time.Millisecond)
	}
}

// getVersion asks the listener once and returns the status and the
// answer's x-config-version.
func getVersion(ctx context.Context, listener int) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, localURL(listener, "/"), nil)
	if err != nil {
		return 0, "", fmt.Errorf("GET: %w", err)
	}
	resp, err := oneShot(2 * time.Second).Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("GET: %w", err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("x-config-version"), nil
}

// idleStats sums up the idle workers' samples.
func idleStats(samples []envoykit.Sample) IdleStats {
	s := IdleStats{FailedBy: map[string]int{}}
	for _, x := range samples {
		s.Sent++
		if x.Idle {
			s.AfterIdle++
		}
		if !x.OK {
			s.Failed++
			s.FailedBy[x.Err]++
			if x.Idle {
				s.FailedAfterIdle++
			}
		}
	}
	return s
}

// rssSample is the serving Envoys' VmRSS summed at one moment.
type rssSample struct {
	at  time.Time
	kib int
}

// rssSampler samples the VmRSS of the agent's serving Envoys (its children
// run with --restart-epoch; not `--mode validate` nor `--version`).
type rssSampler struct {
	done    chan struct{}
	stopped chan []rssSample
	once    sync.Once
	out     []rssSample

	mu   sync.Mutex
	seen map[int]bool
}

func startRSSSampler(agentPid int, every time.Duration) *rssSampler {
	s := &rssSampler{done: make(chan struct{}), stopped: make(chan []rssSample, 1), seen: map[int]bool{}}
	go func() {
		var out []rssSample
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			total := 0
			for _, pid := range servingEnvoys(agentPid) {
				kib, err := statusKiB(pid, "VmRSS")
				if err != nil {
					continue // it exited meanwhile
				}
				total += kib
				s.mu.Lock()
				s.seen[pid] = true
				s.mu.Unlock()
			}
			if total > 0 {
				out = append(out, rssSample{time.Now(), total})
			}
			select {
			case <-s.done:
				s.stopped <- out
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// stop ends the sampling (once) and returns the samples.
func (s *rssSampler) stop() []rssSample {
	s.once.Do(func() {
		close(s.done)
		s.out = <-s.stopped
	})
	return s.out
}

// pids are the serving Envoys seen.
func (s *rssSampler) pids() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int
	for pid := range s.seen {
		out = append(out, pid)
	}
	slices.Sort(out)
	return out
}

// servingEnvoys are the agent's children that serve: their command line
// has --restart-epoch, which the agent's `envoy --mode validate`,
// `--version` and `--hot-restart-version` runs do not.
func servingEnvoys(agentPid int) []int {
	var out []int
	for _, pid := range children(agentPid) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if slices.Contains(args, "--restart-epoch") && !slices.Contains(args, "--mode") {
			out = append(out, pid)
		}
	}
	return out
}

// steadyAndPeak are the median of the samples before from (the steady
// state under load) and the largest from then on (during the reloads and
// until the load ended).
func steadyAndPeak(samples []rssSample, from time.Time) (steady, peak int) {
	var before []int
	for _, x := range samples {
		if x.at.Before(from) {
			before = append(before, x.kib)
		} else {
			peak = max(peak, x.kib)
		}
	}
	if len(before) > 0 {
		slices.Sort(before)
		steady = before[len(before)/2]
	}
	return steady, peak
}
