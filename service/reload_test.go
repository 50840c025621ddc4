//go:build linux

package service

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy"
	"github.com/envoy-agent/envoy-agent/envoy/epochfiles"
	"github.com/envoy-agent/envoy-agent/envoy/inplace"
	"github.com/envoy-agent/envoy-agent/internal/envoykit"
	"github.com/envoy-agent/envoy-agent/service/config"
	"github.com/envoy-agent/envoy-agent/service/control"
	"github.com/envoy-agent/envoy-agent/service/reloadqueue"
)

// A reload's answer names its path with the envoy package's names for it:
// the wire's values and the plan's must not drift apart.
func TestReloadPathNames(t *testing.T) {
	for _, tc := range []struct {
		path envoy.ReloadPath
		want string
	}{{envoy.InPlace, control.PathInPlace}, {envoy.HotRestart, control.PathHotRestart}, {envoy.DrainRestart, control.PathDrainRestart}} {
		if got := tc.path.String(); got != tc.want {
			t.Errorf("%d.String() = %q, want %q", tc.path, got, tc.want)
		}
	}
}

// routesUpdated is an in-place plan that changes one route: what the fake
// Envoy's PlanInPlace answers when the serving epoch can take it.
func routesUpdated() *epochfiles.Plan {
	return &epochfiles.Plan{Change: inplace.Change{Routes: inplace.Delta{Updated: []string{"ingress/0/0"}}}}
}

// TestReloadPlanPath: checkReload decides the path once, from the two
// hot-restart versions, the command line, the binary file and what the
// serving epoch can take in place, and the plan it returns is complete:
// the new epoch's --disable-hot-restart by the one rule (the new binary's
// version), the copy, a drain and restart's settings, the change, the
// bound. The plan is carried out by one Reload call that gets that very
// plan, and the in-place comparison ran once.
func TestReloadPlanPath(t *testing.T) {
	for _, tc := range []struct {
		name             string
		toml             string // keys over baseConfig's
		edit             string // keys of the reloaded file
		serving, next    string
		sameBinary       bool
		inPlace          *epochfiles.Plan
		inPlaceErr       error
		want             envoy.ReloadPath
		why              string // in the answer's Changed, for a new epoch
		noHotRestart     bool   // the new epoch's DisableHotRestart
		timeout          time.Duration
		planned          int // PlanInPlace calls
		answerPath       string
		answerChangedHas string
	}{
		{name: "hot_restart method", toml: "[agent] reload_method = \"hot_restart\"", serving: "11.120", next: "11.120", sameBinary: true, inPlace: routesUpdated(),
			want: envoy.HotRestart, timeout: 3 * time.Second},
		{name: "in place", serving: "11.120", next: "11.120", sameBinary: true, inPlace: routesUpdated(),
			want: envoy.InPlace, timeout: 3 * time.Second, planned: 1, answerPath: "in_place", answerChangedHas: "routes updated ingress/0/0"},
		{name: "command line changes", edit: "[envoy] concurrency = 3", serving: "11.120", next: "11.120", sameBinary: true, inPlace: routesUpdated(),
			want: envoy.HotRestart, why: "Envoy's command line changes", timeout: 3 * time.Second, answerPath: "hot_restart"},
		{name: "binary changed", serving: "11.120", next: "11.120", sameBinary: false, inPlace: routesUpdated(),
			want: envoy.HotRestart, why: "the Envoy binary changed", timeout: 3 * time.Second, answerPath: "hot_restart"},
		{name: "bootstrap outside its resources", serving: "11.120", next: "11.120", sameBinary: true, inPlaceErr: &inplace.RestartError{Reason: "node changed"},
			want: envoy.HotRestart, why: "node changed", timeout: 3 * time.Second, planned: 1, answerPath: "hot_restart"},
		{name: "listener beside its routes", serving: "11.120", next: "11.120", sameBinary: true,
			inPlace: &epochfiles.Plan{Change: inplace.Change{Listeners: inplace.Delta{Updated: []string{"ingress"}}}},
			want:    envoy.HotRestart, why: "listeners ingress change beside their routes", timeout: 3 * time.Second, planned: 1, answerPath: "hot_restart"},
		{name: "listener beside its routes, no hot restart", serving: envoy.HotRestartDisabled, next: envoy.HotRestartDisabled, sameBinary: true,
			inPlace: &epochfiles.Plan{Change: inplace.Change{Listeners: inplace.Delta{Updated: []string{"ingress"}}}},
			want:    envoy.InPlace, noHotRestart: true, timeout: 3 * time.Second, planned: 1, answerPath: "in_place", answerChangedHas: "listeners updated ingress"},
		{name: "new binary without hot restart", serving: "11.120", next: envoy.HotRestartDisabled, sameBinary: false,
			want: envoy.DrainRestart, why: "the Envoy binary changed", noHotRestart: true, timeout: 7*time.Second + drainRestartStopBound + 6*time.Second, answerPath: "drain_restart"},
		{name: "serving without hot restart, new binary with it", serving: envoy.HotRestartDisabled, next: "11.120", sameBinary: false,
			want: envoy.DrainRestart, why: "the Envoy binary changed", timeout: 7*time.Second + drainRestartStopBound + 6*time.Second, answerPath: "drain_restart"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := startFake(t, tc.toml)
			f := fs.envoy
			f.serving, f.next, f.sameBinary, f.inPlace, f.inPlaceErr = tc.serving, tc.next, tc.sameBinary, tc.inPlace, tc.inPlaceErr
			fs.s.setHotRestartVersion(tc.serving)
			fs.writeConfig(tc.toml + "\n" + tc.edit)
			fs.writeBootstrap("v1")

			res := fs.reload()
			if !res.OK {
				t.Fatalf("reload: %+v", res)
			}
			if len(f.reloads) != 1 {
				t.Fatalf("%d Reload calls, want one", len(f.reloads))
			}
			plan := f.reloads[0]
			if plan.Path != tc.want {
				t.Errorf("path %s, want %s (answer %+v)", plan.Path, tc.want, res)
			}
			if plan.Copied == "" || plan.Timeout != tc.timeout || plan.Config.DisableHotRestart != tc.noHotRestart {
				t.Errorf("plan %+v: want a copy, Timeout %s, DisableHotRestart %v", plan, tc.timeout, tc.noHotRestart)
			}
			if plan.Path == envoy.InPlace && plan.InPlace != tc.inPlace {
				t.Errorf("the plan carried out is not the plan PlanInPlace made")
			}
			if plan.Path == envoy.DrainRestart && (plan.Restart.MaxDrain != 7*time.Second || plan.Restart.MinDrain != time.Second || plan.Restart.StartTimeout != 3*time.Second || plan.Restart.Progress == nil) {
				t.Errorf("drain and restart settings %+v, want the [agent] drain and start_timeout", plan.Restart)
			}
			if f.planned != tc.planned {
				t.Errorf("PlanInPlace ran %d times, want %d", f.planned, tc.planned)
			}
			if res.Path != tc.answerPath || !strings.Contains(res.Changed, tc.why) || !strings.Contains(res.Changed, tc.answerChangedHas) {
				t.Errorf("answer path %q changed %q; want %q with %q%q", res.Path, res.Changed, tc.answerPath, tc.why, tc.answerChangedHas)
			}
			if got := fs.s.hotRestartVersion(); got != tc.next {
				t.Errorf("the serving hot-restart version after the reload is %q, want the new binary's %q", got, tc.next)
			}
		})
	}
}

// TestReloadPlanIsAValue: the plan checkReload returns prints as one line
// (what a dry run would show: the epoch it replaces, the path, the copy,
// the bound, why a new epoch) and is carried out later as it was printed,
// by one Reload call that gets that very plan.
func TestReloadPlanIsAValue(t *testing.T) {
	fs := startFake(t, "")
	fs.writeBootstrap("v1")
	p, _, err := fs.s.checkReload(planInput{})
	if err != nil {
		t.Fatal(err)
	}
	printed := p.String()
	for _, want := range []string{"from epoch 0 (pid 100): hot_restart", p.envoy.Copied, "within 3s", "a new epoch because the serving Envoy runs its bootstrap as it is"} {
		if !strings.Contains(printed, want) {
			t.Errorf("the plan prints as %q, without %q", printed, want)
		}
	}
	res := fs.s.applyReload(p, reloadqueue.Run{Start: time.Now()})
	if !res.OK || len(fs.envoy.reloads) != 1 || fs.envoy.reloads[0].String() != p.envoy.String() {
		t.Fatalf("answer %+v, calls %v: want the printed plan carried out once", res, fs.envoy.reloads)
	}
}

// TestReloadVersionMismatch: a binary whose hot-restart version differs
// from the serving Envoy's is refused before anything runs, as a
// configuration error naming both; the copy is removed, the configuration
// in force and the serving version stay, READY=1 says why.
func TestReloadVersionMismatch(t *testing.T) {
	fs := startFake(t, "")
	old := fs.s.config()
	fs.envoy.next = "11.104"
	fs.writeConfig("[agent] exit_on_zero_active_connections = true")
	res := fs.reload()
	if res.OK || !res.Config || !strings.Contains(res.Error, "hot-restart version 11.104, the running Envoy 11.120") {
		t.Fatalf("answer %+v; want a configuration error naming both versions", res)
	}
	if len(fs.envoy.reloads) != 0 {
		t.Errorf("Reload was called for a refused reload")
	}
	if left := fs.envoy.copiesLeft(t); len(left) != 0 {
		t.Errorf("copies left: %v", left)
	}
	if fs.s.config() != old || fs.s.hotRestartVersion() != "11.120" {
		t.Errorf("the configuration or version in force changed")
	}
	fs.ns.WaitFor(t, "READY=1", 5*time.Second)
	if !strings.Contains(lastStatus(fs.ns), "last reload failed") {
		t.Errorf("STATUS= after the refusal: %q", lastStatus(fs.ns))
	}
}

// TestRefusedReloadKeepsTheConfiguration: whatever refuses or fails a
// reload (the TOML, a key a reload cannot change, Envoy's validation, the
// reload's call itself), the configuration in force stays, the copy is
// gone, and the answer says why and whether it is the configuration's.
func TestRefusedReloadKeepsTheConfiguration(t *testing.T) {
	for _, tc := range []struct {
		name      string
		edit      string
		validate  error
		reloadErr error
		config    bool
		errHas    string
		calls     int
	}{
		{name: "bad TOML", edit: "[agent] start_timeout = \"soon\"", config: true, errHas: "start_timeout"},
		{name: "restart-only key", edit: "[envoy] base_id = 9", config: true, errHas: "a reload cannot change envoy.base_id"},
		{name: "validation", validate: &config.ConfigError{Problems: []config.Problem{{File: "x", Msg: "listener: bad"}}}, config: true, errHas: "listener: bad"},
		{name: "the new epoch failed", reloadErr: errors.New("epoch 1 failed: it exited while starting"), errHas: "epoch 1 failed", calls: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := startFake(t, "")
			old := fs.s.config()
			fs.envoy.validateErr, fs.envoy.reloadErr = tc.validate, tc.reloadErr
			fs.writeConfig("[agent] exit_on_zero_active_connections = true\n" + tc.edit)
			res := fs.reload()
			if res.OK || res.Config != tc.config || !strings.Contains(res.Error, tc.errHas) {
				t.Fatalf("answer %+v; want a failure (config %v) with %q", res, tc.config, tc.errHas)
			}
			if len(fs.envoy.reloads) != tc.calls {
				t.Errorf("%d Reload calls, want %d", len(fs.envoy.reloads), tc.calls)
			}
			if fs.s.config() != old {
				t.Errorf("the configuration in force changed after a failed reload")
			}
			if left := fs.envoy.copiesLeft(t); len(left) != 0 {
				t.Errorf("copies left: %v", left)
			}
			if fs.s.now() != phaseLive {
				t.Errorf("phase %d after a failed reload, want live", fs.s.now())
			}
			if got := fs.s.metrics.reloadFailures.Get(); got != 1 {
				t.Errorf("reload failures counted %d, want 1", got)
			}
		})
	}
}

// TestReloadPhases: a reload steps the phase once, to the one its path
// names, for the whole of its call, and back to live after; a stop that
// came meanwhile keeps the supervisor down.
func TestReloadPhases(t *testing.T) {
	for _, tc := range []struct {
		name    string
		serving string
		inPlace *epochfiles.Plan
		stop    bool
		during  phase
		after   phase
	}{
		{name: "hot restart", serving: "11.120", during: phaseReloading, after: phaseLive},
		{name: "in place", serving: "11.120", inPlace: routesUpdated(), during: phaseReloading, after: phaseLive},
		{name: "drain and restart", serving: envoy.HotRestartDisabled, during: phaseDrainRestarting, after: phaseLive},
		{name: "a stop during the reload", serving: "11.120", stop: true, during: phaseReloading, after: phaseDown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := startFake(t, "")
			f := fs.envoy
			f.serving, f.next, f.inPlace = tc.serving, tc.serving, tc.inPlace
			fs.s.setHotRestartVersion(tc.serving)
			var ready bool
			var why string
			f.onReload = func() {
				ready, why = fs.s.ready(context.Background())
				if tc.stop {
					fs.s.goDown()
				}
			}
			fs.writeBootstrap("v1")
			fs.reload()
			if len(f.phases) != 1 || f.phases[0] != tc.during {
				t.Fatalf("phases during Reload %v, want [%d]", f.phases, tc.during)
			}
			if got := fs.s.now(); got != tc.after {
				t.Errorf("phase after %d, want %d", got, tc.after)
			}
			if !ready || why != "LIVE" {
				t.Errorf("/healthz/ready during the reload: %v %q, want the serving Envoy's LIVE", ready, why)
			}
			if tc.stop {
				if res := fs.reload(); res.OK || !strings.Contains(res.Error, "not serving") {
					t.Errorf("a reload after the stop: %+v, want it refused", res)
				}
			}
		})
	}
}

// TestReloadCoalescesWithAStop: a reload waiting for a draining epoch is
// joined by a request that arrives meanwhile (checked at once, its plan
// replacing the first); a stop then ends the wait: both requests hear that
// the agent is stopping, nothing is carried out, no copy is left, and the
// supervisor is down.
func TestReloadCoalescesWithAStop(t *testing.T) {
	fs := startFake(t, "")
	f := fs.envoy
	f.draining = &envoy.DrainingEpoch{Epoch: 0, Pid: 99, Connections: 1, Left: time.Minute}
	first, second := make(chan control.ReloadResult, 1), make(chan control.ReloadResult, 1)
	go func() { first <- fs.s.requestReload(context.Background(), nil, control.ReloadOptions{}) }()
	signalled(t, f.waitStarted, "the first wait")
	fs.writeBootstrap("v2")
	go func() { second <- fs.s.requestReload(context.Background(), nil, control.ReloadOptions{}) }()
	signalled(t, f.waitStarted, "the wait resumed with the second request's plan")
	if left := f.copiesLeft(t); len(left) != 1 {
		t.Errorf("copies during the wait: %v, want only the second request's", left)
	}
	stopped := make(chan struct{})
	fs.s.stop("test stop", func() { close(stopped) })
	<-stopped
	for i, ch := range []chan control.ReloadResult{first, second} {
		select {
		case res := <-ch:
			if res.OK || !strings.Contains(res.Error, "the agent is stopping") || res.WaitedMs > res.TookMs {
				t.Errorf("request %d: %+v; want the stop's error", i+1, res)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("request %d was not answered after the stop", i+1)
		}
	}
	if len(f.reloads) != 0 {
		t.Errorf("%d Reload calls after a stop", len(f.reloads))
	}
	if left := f.copiesLeft(t); len(left) != 0 {
		t.Errorf("copies left: %v", left)
	}
	if !fs.s.stopping() {
		t.Errorf("the supervisor is not down after the stop")
	}
}

// TestReloadClientDeadline: the reload client waits as long as the longest
// reload the agent extends systemd's timeout for, the wait for a draining
// epoch included (with a parent_shutdown_duration of 200 s, a client bound
// without the wait gave up after 122 s while the reload went on). The
// answer's time includes the wait, and the status report shows the same.
func TestReloadClientDeadline(t *testing.T) {
	fs := startFake(t, "")
	cfg := fs.s.config()
	f := fs.envoy
	// The longest wait: Envoy ends the replaced epoch at its
	// parent_shutdown_duration.
	f.draining = &envoy.DrainingEpoch{Epoch: 0, Pid: 99, Connections: 1, Left: cfg.Envoy.ParentShutdownDuration.D()}
	mark := fs.ns.Mark()
	done := make(chan control.ReloadResult, 1)
	go func() { done <- fs.s.requestReload(context.Background(), nil, control.ReloadOptions{}) }()
	signalled(t, f.waitStarted, "the wait")
	close(f.waitRelease)
	res := <-done
	if !res.OK || res.WaitedMs > res.TookMs {
		t.Fatalf("answer %+v; want ok, its wait part of its time", res)
	}
	// READY=1 ends the reload; the extensions came before it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := fs.ns.WaitFrom(ctx, "READY=1", mark, nil); err != nil {
		t.Fatal(err)
	}
	client := cfg.ReloadClientTimeout(false)
	var longest time.Duration
	for _, m := range fs.ns.Messages()[mark:] {
		for _, line := range strings.Split(m.Text, "\n") {
			if v, ok := strings.CutPrefix(line, "EXTEND_TIMEOUT_USEC="); ok {
				us, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				longest = max(longest, time.Duration(us)*time.Microsecond)
			}
		}
	}
	if longest < cfg.Envoy.ParentShutdownDuration.D() {
		t.Fatalf("the longest EXTEND_TIMEOUT_USEC during the wait was %s: it does not cover the wait", longest)
	}
	if client < longest {
		t.Errorf("the client's deadline %s is shorter than the agent's extension %s: the client would give up while the reload goes on", client, longest)
	}
	if rep := fs.s.statusReport(context.Background()); rep.LastReload == nil || rep.LastReload.TookMs != res.TookMs {
		t.Errorf("status report's last reload %+v; want took_ms %d, the answer's", rep.LastReload, res.TookMs)
	}
}

// TestReloadTimeoutsCoverTheirPath: the client's deadline covers each
// path's own bound too: a drain and restart's drain, stop and two starts.
func TestReloadTimeoutsCoverTheirPath(t *testing.T) {
	cfg := startFake(t, "").s.config()
	for _, p := range []envoy.ReloadPath{envoy.HotRestart, envoy.InPlace, envoy.DrainRestart} {
		if bound := reloadTimeout(cfg, p) + config.ValidateTimeout; bound > cfg.ReloadClientTimeout(false) {
			t.Errorf("%s: the call's bound with its validation, %s, is past the client's deadline %s", p, bound, cfg.ReloadClientTimeout(false))
		}
	}
}

// The path a reload takes and what the installed-Envoy watch says a
// reload would do come from one rule.
func TestReloadPathRule(t *testing.T) {
	for _, tc := range []struct {
		serving, next string
		want          envoy.ReloadPath
		err           bool
	}{
		{"11.120", "11.120", envoy.HotRestart, false},
		{"11.120", "11.104", envoy.HotRestart, true},
		{"11.120", "disabled", envoy.DrainRestart, false},
		{"disabled", "11.120", envoy.DrainRestart, false},
		{"disabled", "disabled", envoy.DrainRestart, false},
		{"", "11.120", envoy.HotRestart, true},
	} {
		got, err := reloadPath(tc.serving, tc.next)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("reloadPath(%q, %q) = %s, %v; want %s, error %v", tc.serving, tc.next, got, err, tc.want, tc.err)
		}
	}
}

func signalled(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not happen within 10 s", what)
	}
}

// lastStatus is the last STATUS= the notify socket got.
func lastStatus(ns *envoykit.NotifySocket) string {
	var last string
	for _, m := range ns.Messages() {
		for _, line := range strings.Split(m.Text, "\n") {
			if v, ok := strings.CutPrefix(line, "STATUS="); ok {
				last = v
			}
		}
	}
	return last
}

// waitStatsReads waits until the reload guard read the fake's statistics
// n more times.
func waitStatsReads(t *testing.T, f *fakeEnvoy, n int) {
	t.Helper()
	f.mu.Lock()
	want := f.statsReads + n
	f.mu.Unlock()
	if !envoykit.Eventually(20*time.Second, func() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.statsReads >= want }) {
		t.Fatalf("the reload guard did not read Envoy %d times within 20 s", n)
	}
}

// failAfterReload makes every request Envoy counts a 5xx from the first
// Reload call on, and none from the second (the rollback) on.
func failAfterReload(f *fakeEnvoy) {
	f.onReload = func() {
		f.mu.Lock()
		n := len(f.reloads)
		f.mu.Unlock()
		f.setFailing(n == 1)
	}
}

// keptCopiesLeft are the copies of the serving configuration that
// KeepServingCopy made and nobody took.
func keptCopiesLeft(t *testing.T, f *fakeEnvoy) []string {
	t.Helper()
	var kept []string
	for _, c := range f.copiesLeft(t) {
		if b, err := os.ReadFile(c); err == nil && string(b) == "# the serving copy\n" {
			kept = append(kept, c)
		}
	}
	return kept
}

// TestGuardRollsBackInPlace: with the reload guard on, a reload in place
// after which every answer is a 5xx is rolled back in place, to the copy
// of the serving configuration kept before the reload; the configuration
// before is the agent's again; the status, the metric, the log and
// STATUS= say so; `reload --wait` exits with the verdict; a reload of the
// same files is refused (a configuration error) naming the rollback,
// unless forced.
func TestGuardRollsBackInPlace(t *testing.T) {
	fs := startFake(t, `[agent] reload_guard = "3s"`)
	f := fs.envoy
	f.inPlace = routesUpdated()
	before := fs.s.config()
	waitStatsReads(t, f, 3) // the baseline
	fs.writeBootstrap("v1")
	failAfterReload(f)
	mark := len(fs.ns.Messages())
	res := fs.reloadWith(control.ReloadOptions{Wait: true})
	if !res.OK || res.Outcome != control.OutcomeRolledBack || res.Rollback == nil || res.Rollback.Error != "" {
		t.Fatalf("reload --wait: %+v, want ok and rolled back", res)
	}
	if len(f.reloads) != 2 {
		t.Fatalf("%d Reload calls, want the reload and its rollback", len(f.reloads))
	}
	back := f.reloads[1]
	if back.Path != envoy.InPlace || back.InPlace != f.inPlace || !strings.Contains(back.Copied, "epoch-1-") || back.Copied == f.reloads[0].Copied {
		t.Errorf("the rollback's plan %+v: want in place, to the kept copy", back)
	}
	if f.phases[1] != phaseReloading {
		t.Errorf("the phase during the rollback: %v, want reloading", f.phases[1])
	}
	rb := res.Rollback
	if rb.Path != control.PathInPlace || len(rb.Findings) == 0 || rb.Findings[0].Signal != "downstream_5xx" || !strings.Contains(rb.Reason, "5xx answers") {
		t.Errorf("rollback %+v", rb)
	}
	if fs.s.config() != before {
		t.Errorf("after the rollback the configuration in force is not the one before the reload")
	}
	rep := fs.s.statusReport(context.Background())
	if lr := rep.LastReload; lr == nil || lr.Outcome != control.OutcomeRolledBack || lr.Rollback == nil || lr.Rollback.Reason != rb.Reason {
		t.Errorf("status last_reload %+v", rep.LastReload)
	}
	if rep.Reloads.RolledBack != 1 || rep.Files == nil || rep.Files.State != control.FilesDiffer || !strings.Contains(rep.Files.Reason, "was rolled back by the reload guard") {
		t.Errorf("status reloads %+v, files %+v", rep.Reloads, rep.Files)
	}
	if got := fs.s.metrics.reloadRollbacks.Get(); got != 1 {
		t.Errorf("envoy_agent_reload_rollbacks_total = %d, want 1", got)
	}
	if !envoykit.Eventually(5*time.Second, func() bool {
		return strings.Contains(fs.log.String(), "reload guard: rolled back the reload") && strings.Contains(fs.log.String(), "signal=downstream_5xx")
	}) {
		t.Errorf("no warning of the rollback with its signal in the log:\n%s", fs.log)
	}
	said := ""
	envoykit.Eventually(5*time.Second, func() bool {
		said = ""
		for _, m := range fs.ns.Messages()[mark:] {
			said += m.Text + "\n"
		}
		return strings.Contains(said, "ROLLED BACK by the reload guard")
	})
	if !strings.Contains(said, "ROLLED BACK by the reload guard") || strings.Count(said, "RELOADING=1") != 1 {
		t.Errorf("notify messages since the reload: %q; want one RELOADING=1 (the reload's) and the rollback in STATUS=", said)
	}

	again := fs.reload()
	if again.OK || !again.Config || !strings.Contains(again.Error, "were rolled back by the reload guard at") || !strings.Contains(again.Error, "--force") {
		t.Errorf("a reload of the rolled-back files: %+v, want refused as a configuration error naming the rollback", again)
	}
	f.onReload = nil
	forced := fs.reloadWith(control.ReloadOptions{Force: true})
	if !forced.OK || forced.Outcome != control.OutcomeGuarding {
		t.Errorf("a forced reload of them: %+v, want taken and watched", forced)
	}
}

// TestGuardKeepsAGoodReload: a reload whose traffic stays as it was is
// kept when the window ends: `reload --wait` says so, the status says ok,
// and the copy kept for a rollback is removed. A reload with the guard
// off, or one that changes nothing, is not watched and answered at once.
func TestGuardKeepsAGoodReload(t *testing.T) {
	fs := startFake(t, `[agent] reload_guard = "3s"`)
	f := fs.envoy
	f.inPlace = routesUpdated()
	waitStatsReads(t, f, 2)
	fs.writeBootstrap("v1")
	res := fs.reloadWith(control.ReloadOptions{Wait: true})
	if !res.OK || res.Outcome != control.OutcomeOK || !strings.Contains(res.Guard, "no regression over") || len(f.reloads) != 1 {
		t.Fatalf("reload --wait: %+v (%d Reload calls), want kept", res, len(f.reloads))
	}
	if lr := fs.s.statusReport(context.Background()).LastReload; lr == nil || lr.Outcome != control.OutcomeOK || lr.GuardEnds != "" {
		t.Errorf("status last_reload %+v, want ok", lr)
	}
	if !envoykit.Eventually(5*time.Second, func() bool { return len(keptCopiesLeft(t, f)) == 0 }) {
		t.Errorf("the copy kept for a rollback is still there: %v", keptCopiesLeft(t, f))
	}

	f.inPlace = &epochfiles.Plan{} // nothing changed
	if res := fs.reloadWith(control.ReloadOptions{Wait: true}); !res.OK || res.Outcome != control.OutcomeOK || res.GuardWindow != 0 {
		t.Errorf("a reload of the same files: %+v, want ok at once, not watched", res)
	}
	fs.writeConfig("[agent] reload_guard = \"0s\"")
	fs.writeBootstrap("v2")
	f.inPlace = routesUpdated()
	if res := fs.reloadWith(control.ReloadOptions{Wait: true}); !res.OK || res.Outcome != control.OutcomeOK || res.GuardWindow != 0 {
		t.Errorf("a reload that turns the guard off: %+v, want ok at once, not watched", res)
	}
	if left := keptCopiesLeft(t, f); len(left) != 0 {
		t.Errorf("copies kept for a rollback left: %v", left)
	}
}

// TestGuardRollsBackAHotRestart: a reload by hot restart that makes
// things worse is rolled back by a hot restart to the kept copy with the
// configuration before, once the epoch the reload replaced has drained (a
// new epoch would end it at once); a later reload supersedes a watch.
func TestGuardRollsBackAHotRestart(t *testing.T) {
	fs := startFake(t, `[agent] reload_guard = "3s"`)
	f := fs.envoy
	waitStatsReads(t, f, 3)
	fs.writeBootstrap("v1")
	failAfterReload(f)
	res := fs.reload()
	if !res.OK || res.Outcome != control.OutcomeGuarding || res.Epoch != 1 {
		t.Fatalf("reload: %+v", res)
	}
	// The epoch it replaced still drains when the regression is called.
	f.mu.Lock()
	f.draining = &envoy.DrainingEpoch{Epoch: 0, Pid: 100, Connections: 1, Left: 10 * time.Second}
	f.mu.Unlock()
	signalled(t, f.waitStarted, "the rollback's wait for the draining epoch")
	if n := len(f.reloads); n != 1 {
		t.Fatalf("%d Reload calls while epoch 0 drains, want the reload's only", n)
	}
	close(f.waitRelease)
	if !envoykit.Eventually(10*time.Second, func() bool {
		lr := fs.s.statusReport(context.Background()).LastReload
		return lr != nil && lr.Outcome == control.OutcomeRolledBack
	}) {
		t.Fatalf("not rolled back: %+v", fs.s.statusReport(context.Background()).LastReload)
	}
	back := f.reloads[1]
	if back.Path != envoy.HotRestart || back.InPlace != nil || !strings.Contains(back.Copied, "epoch-1-") || back.Config.DisableHotRestart {
		t.Errorf("the rollback's plan %+v: want a hot restart to the kept copy", back)
	}
	if lr := fs.s.statusReport(context.Background()).LastReload; lr.Epoch != 2 || lr.Rollback.Path != control.PathHotRestart {
		t.Errorf("last_reload %+v: want epoch 2 serving after a hot-restart rollback", lr)
	}

	// A later reload supersedes a watch: its waiter is told, and nothing
	// is rolled back.
	f.mu.Lock()
	f.draining = nil
	f.mu.Unlock()
	f.onReload = nil
	fs.writeBootstrap("v2")
	ch := make(chan control.ReloadResult, 1)
	go func() { ch <- fs.s.requestReload(context.Background(), nil, control.ReloadOptions{Wait: true}) }()
	if !envoykit.Eventually(10*time.Second, func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.reloads) == 3 }) {
		t.Fatal("the reload did not run")
	}
	fs.writeBootstrap("v3")
	if r := fs.reload(); !r.OK {
		t.Fatalf("the later reload: %+v", r)
	}
	first := <-ch
	if !first.OK || first.Outcome != control.OutcomeOK || !strings.Contains(first.Guard, "a later reload") {
		t.Errorf("the superseded reload's --wait: %+v", first)
	}
}

// TestDryRunChangesNothing: a dry run plans through the reload queue and
// answers the plan: no RELOADING=1, no phase step, no call to Envoy, no
// copy left in the run folder.
func TestDryRunChangesNothing(t *testing.T) {
	fs := startFake(t, "")
	f := fs.envoy
	f.inPlace = routesUpdated()
	fs.writeBootstrap("v1")
	mark := len(fs.ns.Messages())
	res := fs.s.requestPlan(context.Background(), nil, false)
	if !res.OK || !res.DryRun || res.Plan == nil || res.Plan.Path != control.PathInPlace || len(res.Plan.Routes.Changed) != 1 || res.Plan.Pid != 100 {
		t.Fatalf("plan: %+v %+v", res, res.Plan)
	}
	if len(f.reloads) != 0 || fs.s.now() != phaseLive || len(f.copiesLeft(t)) != 0 || len(fs.ns.Messages()) != mark {
		t.Errorf("a dry run changed something: %d Reload calls, phase %v, copies %v, notify %v", len(f.reloads), fs.s.now(), f.copiesLeft(t), fs.ns.Messages()[mark:])
	}
	f.validateErr = &config.ConfigError{Problems: []config.Problem{{File: "x", Msg: "bad"}}}
	if res := fs.s.requestPlan(context.Background(), nil, false); res.OK || !res.Config || !res.DryRun {
		t.Errorf("a dry run of a bootstrap Envoy rejects: %+v, want refused as a configuration error", res)
	}
}

// TestGuardRollsBackADrainRestart: where hot restart is compiled out, a
// reload that makes things worse is rolled back as it came, by a drain
// and restart to the kept copy with the configuration before's drain.
func TestGuardRollsBackADrainRestart(t *testing.T) {
	fs := startFake(t, `[agent] reload_guard = "3s"`)
	f := fs.envoy
	f.serving, f.next = envoy.HotRestartDisabled, envoy.HotRestartDisabled
	fs.s.setHotRestartVersion(envoy.HotRestartDisabled)
	waitStatsReads(t, f, 3)
	fs.writeBootstrap("v1")
	failAfterReload(f)
	res := fs.reloadWith(control.ReloadOptions{Wait: true})
	if !res.OK || res.Outcome != control.OutcomeRolledBack || res.Rollback == nil || res.Rollback.Path != control.PathDrainRestart {
		t.Fatalf("reload --wait: %+v, want rolled back by a drain and restart", res)
	}
	back := f.reloads[1]
	if back.Path != envoy.DrainRestart || !back.Config.DisableHotRestart || back.Restart.MaxDrain != 7*time.Second || !strings.Contains(back.Copied, "epoch-1-") {
		t.Errorf("the rollback's plan %+v: want a drain and restart to the kept copy, with the drain before", back)
	}
	if f.phases[1] != phaseDrainRestarting {
		t.Errorf("the phase during the rollback: %v, want drain-restarting", f.phases[1])
	}
}
