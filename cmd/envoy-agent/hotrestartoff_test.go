//go:build linux

package main

// An Envoy whose hot restart is compiled out (Istio's and AWS's builds):
// `envoy --hot-restart-version` prints "disabled". No release binary at hand
// is built that way, and a build flag cannot be turned off in one, so these
// tests run a stand-in, named as such: a script that answers
// --hot-restart-version as such a build does and otherwise execs the real
// Envoy with the agent's arguments and --disable-hot-restart, so that it
// behaves as such a build does whatever it is given (it sets up no hot
// restart, and its /server_info says "disabled"). The agent learns the mode
// from that /server_info once Envoy is LIVE (it does not delay every start
// to ask the binary first); from then on it must add --disable-hot-restart
// itself and leave out the hot-restart arguments. The tests check the
// command line, the shared memory and Envoy's /server_info.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
	"github.com/envoy-agent/envoy-agent/internal/hostfiles"
)

// hotRestartOffNote is what the agent says of such an Envoy.
const hotRestartOffNote = "hot restart is compiled out of this Envoy: reload drains and restarts (connections are closed)"

// writeHotRestartOffStandIn writes the stand-in for an Envoy built without
// hot restart into dir.
func writeHotRestartOffStandIn(t *testing.T, dir string) string {
	t.Helper()
	standIn := filepath.Join(dir, "envoy-hot-restart-compiled-out-stand-in")
	writeFile(t, standIn, "#!/bin/sh\n[ \"$1\" = --hot-restart-version ] && { echo disabled; exit 0; }\ncase \" $* \" in *\" --disable-hot-restart \"*) ;; *) set -- \"$@\" --disable-hot-restart;; esac\nexec "+envoykit.Binary(t)+" \"$@\"\n")
	if err := os.Chmod(standIn, 0o755); err != nil {
		t.Fatal(err)
	}
	return standIn
}

// envoyArgs is the command line of process pid.
func envoyArgs(t *testing.T, pid int) []string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatalf("command line of envoy pid %d: %v", pid, err)
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

var baseIDRE = regexp.MustCompile(`(?m)^base_id = (\d+)$`)

// checkRunsWithoutHotRestart fails t unless Envoy pid runs as an Envoy
// without hot restart must: --disable-hot-restart, no shared memory, and
// /server_info says "disabled"; and, unless it is the first Envoy the agent
// started (before Envoy told it the mode), none of the hot-restart
// arguments.
func (p *agentProc) checkRunsWithoutHotRestart(pid int, firstStart bool) {
	p.t.Helper()
	args := envoyArgs(p.t, pid)
	if !slices.Contains(args, "--disable-hot-restart") {
		p.t.Errorf("envoy pid %d runs without --disable-hot-restart: %q", pid, args)
	}
	for _, flag := range []string{"--base-id", "--restart-epoch", "--parent-shutdown-time-s"} {
		if !firstStart && slices.Contains(args, flag) {
			p.t.Errorf("envoy pid %d runs with the hot-restart argument %s: %q", pid, flag, args)
		}
	}
	config, err := os.ReadFile(p.config)
	if err != nil {
		p.t.Fatal(err)
	}
	m := baseIDRE.FindSubmatch(config)
	if m == nil {
		p.t.Fatalf("no base_id in %s", config)
	}
	id, _ := strconv.ParseUint(string(m[1]), 10, 32)
	if shm := hostfiles.SharedMemoryPath(uint32(id)); fileExists(shm) {
		p.t.Errorf("%s exists: envoy pid %d set up hot restart", shm, pid)
	}
	if v := p.serverInfo()["hot_restart_version"]; v != "disabled" {
		p.t.Errorf("envoy pid %d: /server_info says hot_restart_version %v, want disabled", pid, v)
	}
}

// serverInfo is Envoy's /server_info.
func (p *agentProc) serverInfo() map[string]any {
	p.t.Helper()
	r, err := envoykit.Get(envoykit.URL(p.ports.Admin, "/server_info"), 5*time.Second)
	if err != nil || r.Code != 200 {
		p.t.Fatalf("/server_info: %+v, %v", r, err)
	}
	var si map[string]any
	if err := json.Unmarshal([]byte(r.Body), &si); err != nil {
		p.t.Fatalf("/server_info: %v", err)
	}
	return si
}

// answer is the x-config-version Envoy's listener answers with.
func (p *agentProc) answer() string {
	p.t.Helper()
	r, err := envoykit.Get(envoykit.URL(p.ports.Listener, "/"), 10*time.Second)
	if err != nil || r.Code != 200 {
		p.t.Fatalf("GET /: %+v, %v", r, err)
	}
	return r.Header.Get("x-config-version")
}

func TestHotRestartCompiledOutStartsWithoutHotRestart(t *testing.T) {
	t.Parallel()
	standIn := writeHotRestartOffStandIn(t, t.TempDir())
	p := startAgent(t, procOptions{envoy: map[string]string{"binary_path": strconv.Quote(standIn)}})
	p.waitStatus(30*time.Second, hotRestartOffNote)
	p.checkRunsWithoutHotRestart(p.envoyPid, true)
	code, stdout, stderr := runAgent(t, "status", "--config", p.config)
	if code != 0 || !strings.Contains(stdout, "hot-restart version disabled") || !strings.Contains(stdout, hotRestartOffNote) {
		t.Errorf("envoy-agent status: exit %d: %s%s", code, stdout, stderr)
	}
	if !p.logged("it runs with --disable-hot-restart") {
		t.Errorf("the log does not say the mode")
	}
}

func TestHotRestartCompiledOutReloadDrainsAndRestarts(t *testing.T) {
	t.Parallel()
	standIn := writeHotRestartOffStandIn(t, t.TempDir())
	p := startAgent(t, procOptions{envoy: map[string]string{"binary_path": strconv.Quote(standIn)},
		agent:     map[string]string{"min_drain_duration": `"1s"`, "termination_drain_duration": `"15s"`},
		bootstrap: envoykit.BootstrapOptions{ResponseHeader: "v0"}})
	first := p.envoyPid
	bootstrap := filepath.Join(p.dir, "envoy.yaml")
	good, err := os.ReadFile(bootstrap)
	if err != nil {
		t.Fatal(err)
	}

	// A bad configuration is refused before anything is drained.
	writeFile(t, bootstrap, strings.Replace(string(good), "type: STATIC", "type: NOT_A_TYPE", 1))
	if code, out := p.reload(); code != 3 || !strings.Contains(out, "Envoy rejects this bootstrap") {
		t.Fatalf("reload of a bad bootstrap: exit %d: %s", code, out)
	}
	if pid := p.servingPid(); pid != first || !envoykit.Alive(first) {
		t.Fatalf("after the refused reload Envoy pid %d serves; want pid %d, untouched", pid, first)
	}
	if c := p.healthz(); c != 200 {
		t.Errorf("/healthz/ready = %d after the refused reload", c)
	}
	if v := p.answer(); v != "v0" {
		t.Errorf("after the refused reload Envoy answers %q, want v0", v)
	}

	// A good one drains the serving Envoy (its request in flight completes)
	// and starts the new configuration in a new Envoy; the agent takes the
	// TOML's new settings too (a stop's drain bound, seen at the stop).
	p.rewriteBootstrap(envoykit.BootstrapOptions{ResponseHeader: "v1"})
	config, err := os.ReadFile(p.config)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, p.config, strings.Replace(string(config), `termination_drain_duration = "15s"`, `termination_drain_duration = "12s"`, 1))
	slow := p.slowRequest(false, 2*time.Second)
	code, out := p.reload()
	if code != 0 || !strings.Contains(out, hotRestartOffNote) || !strings.Contains(out, fmt.Sprintf("Envoy pid %d drained for", first)) {
		t.Fatalf("reload: exit %d: %s", code, out)
	}
	(<-slow).check(t, "the request in flight during the reload's drain")
	second := p.servingPid()
	if second == first || envoykit.Alive(first) {
		t.Fatalf("after the reload Envoy pid %d serves and pid %d alive %v; want a new Envoy in place of the old", second, first, envoykit.Alive(first))
	}
	p.envoyPid = second
	if v := p.answer(); v != "v1" {
		t.Errorf("after the reload Envoy answers %q, want v1", v)
	}
	p.checkRunsWithoutHotRestart(second, false)
	var draining, readyAfter bool
	for _, m := range p.ns.Messages() {
		draining = draining || strings.Contains(m.Text, fmt.Sprintf("STATUS=reloading: draining Envoy pid %d before restarting it", first))
		readyAfter = readyAfter || (envoykit.HasAssignment(m.Text, "READY=1") && strings.Contains(m.Text, "reloaded") && strings.Contains(m.Text, hotRestartOffNote))
	}
	if !draining || !readyAfter {
		t.Errorf("STATUS= said the drain %v, READY=1 after the reload said the mode %v: %v", draining, readyAfter, p.ns.Messages())
	}
	if !p.logged("reload: " + hotRestartOffNote) {
		t.Errorf("the log does not say how the reload went")
	}

	// The stop still drains.
	sent := p.signal(syscall.SIGTERM)
	if code, took := p.wait(sent, 30*time.Second); code != 0 || took < time.Second {
		t.Fatalf("stop after the restart: exit %d after %s; want 0 after min_drain_duration 1s", code, took)
	}
	if !p.logged("draining envoy: up to 12s") {
		t.Errorf("the stop did not drain with the reloaded termination_drain_duration 12s")
	}
	assertNoEnvoyFor(t, p.dir)
}

// servingPid is the Envoy pid the agent's status names.
func (p *agentProc) servingPid() int {
	p.t.Helper()
	code, stdout, stderr := runAgent(p.t, "status", "--config", p.config, "--json")
	if code != 0 {
		p.t.Fatalf("envoy-agent status: exit %d: %s%s", code, stdout, stderr)
	}
	var st struct {
		Epochs []struct {
			Pid  int    `json:"pid"`
			Role string `json:"role"`
		} `json:"epochs"`
	}
	if err := json.Unmarshal([]byte(stdout), &st); err != nil {
		p.t.Fatalf("envoy-agent status --json: %v: %s", err, stdout)
	}
	for _, e := range st.Epochs {
		if e.Role == "serving" {
			return e.Pid
		}
	}
	p.t.Fatalf("envoy-agent status --json names no serving Envoy: %s", stdout)
	return 0
}

// An Envoy binary upgrade to or from a build without hot restart (binary_path
// changed, then a reload) drains and restarts into the new binary, which then
// runs as its own build wants: the next reload hot-restarts it, or restarts
// it again.
func TestHotRestartCompiledOutBinaryUpgrade(t *testing.T) {
	tests := []struct {
		name    string
		fromOff bool // the first binary is the stand-in without hot restart
	}{
		{"to a build without hot restart", false},
		{"from a build without hot restart", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			standIn := writeHotRestartOffStandIn(t, t.TempDir())
			from, to := envoykit.Binary(t), standIn
			if tt.fromOff {
				from, to = standIn, envoykit.Binary(t)
			}
			p := startAgent(t, procOptions{envoy: map[string]string{"binary_path": strconv.Quote(from)},
				agent:     map[string]string{"min_drain_duration": `"1s"`, "termination_drain_duration": `"10s"`},
				bootstrap: envoykit.BootstrapOptions{ResponseHeader: "v0"}})
			first := p.envoyPid
			config, err := os.ReadFile(p.config)
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, p.config, strings.Replace(string(config), strconv.Quote(from), strconv.Quote(to), 1))
			p.rewriteBootstrap(envoykit.BootstrapOptions{ResponseHeader: "v1"})
			code, out := p.reload()
			if code != 0 || !strings.Contains(out, hotRestartOffNote) || !strings.Contains(out, fmt.Sprintf("Envoy pid %d drained for", first)) {
				t.Fatalf("reload into %s: exit %d: %s", to, code, out)
			}
			second := p.servingPid()
			if second == first || envoykit.Alive(first) {
				t.Fatalf("after the upgrade Envoy pid %d serves, pid %d alive %v; want a new Envoy", second, first, envoykit.Alive(first))
			}
			p.envoyPid = second
			if v := p.answer(); v != "v1" {
				t.Errorf("after the upgrade Envoy answers %q, want v1", v)
			}
			if args := envoyArgs(t, second); args[0] != envoykit.Binary(t) {
				t.Errorf("the new Envoy runs %q", args)
			}
			if tt.fromOff {
				// Now a build with hot restart: it runs with it, and the next
				// reload is a hot restart.
				if args := envoyArgs(t, second); !slices.Contains(args, "--base-id") || slices.Contains(args, "--disable-hot-restart") {
					t.Errorf("the upgraded Envoy runs without hot restart: %q", args)
				}
			} else {
				p.checkRunsWithoutHotRestart(second, false)
			}
			p.rewriteBootstrap(envoykit.BootstrapOptions{ResponseHeader: "v2"})
			code, out = p.reload()
			switch {
			case tt.fromOff && (code != 0 || !strings.Contains(out, "reloaded: epoch 1 is serving") || strings.Contains(out, hotRestartOffNote)):
				t.Fatalf("the reload after the upgrade: exit %d: %s; want a hot restart to epoch 1", code, out)
			case !tt.fromOff && (code != 0 || !strings.Contains(out, fmt.Sprintf("Envoy pid %d drained for", second))):
				t.Fatalf("the reload after the upgrade: exit %d: %s; want another drain and restart", code, out)
			}
			if v := p.answer(); v != "v2" {
				t.Errorf("after the second reload Envoy answers %q, want v2", v)
			}
		})
	}
}

// A live upgrade of the agent hands the mode over with the Envoy: the new
// agent's reload still drains and restarts, and the new Envoy still runs
// without hot restart.
func TestHotRestartCompiledOutSurvivesAgentUpgrade(t *testing.T) {
	t.Parallel()
	binA, binB := buildVersion(t, "1.0.0-a"), buildVersion(t, "1.0.1-b")
	installed := filepath.Join(t.TempDir(), "envoy-agent")
	install(t, binA, installed)
	standIn := writeHotRestartOffStandIn(t, t.TempDir())
	p := startAgent(t, procOptions{binary: installed, envoy: map[string]string{"binary_path": strconv.Quote(standIn)},
		bootstrap: envoykit.BootstrapOptions{ResponseHeader: "v0"}})
	first := p.envoyPid
	install(t, binB, installed)
	if code, out := runBinary(t, nil, binB, "upgrade", "--config", p.config); code != 0 || !strings.Contains(out, "-> 1.0.1-b") {
		t.Fatalf("upgrade: exit %d: %s", code, out)
	}
	if info := p.upgradeInfo(); info["version"] != "1.0.1-b" || int(info["envoy_pid"].(float64)) != first {
		t.Fatalf("after the upgrade: %v; want 1.0.1-b serving envoy pid %d", info, first)
	}
	p.rewriteBootstrap(envoykit.BootstrapOptions{ResponseHeader: "v1"})
	code, out := p.reload()
	if code != 0 || !strings.Contains(out, fmt.Sprintf("Envoy pid %d drained for", first)) {
		t.Fatalf("reload after the upgrade: exit %d: %s", code, out)
	}
	p.envoyPid = p.servingPid()
	p.checkRunsWithoutHotRestart(p.envoyPid, false)
	if v := p.answer(); v != "v1" {
		t.Errorf("after the reload Envoy answers %q, want v1", v)
	}
}

// TestDrainAtBoundCounted: a reload that drains and restarts Envoy, whose
// drain reaches termination_drain_duration with a request still held, counts
// in envoy_agent_drains_incomplete_total{kind="restart"} (the metric of the
// EnvoyAgentDrainIncomplete alert); a drain that ends at zero does not.
func TestDrainAtBoundCounted(t *testing.T) {
	t.Parallel()
	standIn := writeHotRestartOffStandIn(t, t.TempDir())
	p := startAgent(t, procOptions{envoy: map[string]string{"binary_path": strconv.Quote(standIn)},
		agent: map[string]string{"min_drain_duration": `"0s"`, "termination_drain_duration": `"2s"`}})
	const restart, stop = `envoy_agent_drains_incomplete_total{kind="restart"}`, `envoy_agent_drains_incomplete_total{kind="stop"}`
	if r, s := p.metric(restart), p.metric(stop); r != "0" || s != "0" {
		t.Fatalf("before any drain: restart %q, stop %q; want both 0", r, s)
	}
	// Nothing held: the drain ends at zero connections.
	if code, out := p.reload(); code != 0 {
		t.Fatalf("reload: exit %d: %s", code, out)
	}
	if r := p.metric(restart); r != "0" {
		t.Errorf("after a drain that ended at zero: %s %q, want 0", restart, r)
	}
	// A request held past the 2s bound.
	held := p.slowRequest(false, 20*time.Second)
	if code, out := p.reload(); code != 0 {
		t.Fatalf("reload: exit %d: %s", code, out)
	}
	if r := p.metric(restart); r != "1" {
		t.Errorf("after a drain cut at its bound with a request held: %s %q, want 1", restart, r)
	}
	if res := <-held; res.err == nil && res.code == 200 {
		t.Errorf("the held request completed (%d after %s); the drain should have cut it", res.code, res.took)
	}
}

// With reload_method "auto", an Envoy without hot restart takes a route
// change in place: the same process, no drain, no connection refused or
// request failed under a load that does not retry.
func TestHotRestartCompiledOutReloadsInPlace(t *testing.T) {
	t.Parallel()
	standIn := writeHotRestartOffStandIn(t, t.TempDir())
	p := startAgent(t, procOptions{envoy: map[string]string{"binary_path": strconv.Quote(standIn)},
		agent: map[string]string{"reload_method": `"auto"`}, bootstrap: envoykit.BootstrapOptions{ResponseHeader: "v0"}})
	p.waitStatus(30*time.Second, hotRestartOffNote)
	first := p.servingPid()
	l := envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: envoykit.URL(p.ports.Listener, "/"), Client: envoykit.RawHTTP1,
		Workers: []envoykit.Workers{{N: 4, Path: "/"}}})
	defer l.Stop()
	envoykit.WaitAnswers(t, l, 20)
	for i := 1; i <= 3; i++ {
		p.rewriteBootstrap(envoykit.BootstrapOptions{ResponseHeader: fmt.Sprintf("v%d", i)})
		code, out := p.reload()
		if code != 0 || !strings.Contains(out, "reloaded in place: routes updated ingress/0/0; epoch 0 keeps serving") {
			t.Fatalf("reload %d: exit %d: %s", i, code, out)
		}
		if !envoykit.Eventually(5*time.Second, func() bool { return l.Latest() == fmt.Sprintf("v%d", i) }) {
			t.Fatalf("after reload %d the listener answers %q", i, l.Latest())
		}
	}
	l.Stop()
	if pid := p.servingPid(); pid != first || !envoykit.Alive(first) {
		t.Fatalf("after in-place reloads Envoy pid %d serves; want pid %d", pid, first)
	}
	if l.Failed() != 0 {
		t.Errorf("%d of %d requests failed (last: %s)", l.Failed(), l.OK()+l.Failed(), l.LastErr())
	}
	p.checkRunsWithoutHotRestart(first, true)
}
