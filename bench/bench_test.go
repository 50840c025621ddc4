package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// A smoke run of the benchmark with the real Envoy and the agent built from
// this tree: the start and reload scenarios, at their smallest, produce the
// table, results.json and reload.svg, with the numbers each scenario
// promises.
func TestBenchSmoke(t *testing.T) {
	if testing.Short() || envoykit.UnitTier() {
		t.Skip("the benchmark smoke run takes about 20 s and runs the real Envoy: make test")
	}
	envoyBin, agent := smokeBinaries(t)
	launcher := filepath.Join(t.TempDir(), "launcher")
	if out, err := exec.Command("go", "build", "-o", launcher, "./launcher").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, stdout, res := runSmoke(t, "-agent", agent, "-launcher", launcher, "-envoy", envoyBin, "-starts", "10", "-reloads", "1",
		"-rate", "100", "-scenarios", "start,reload")
	for _, want := range []string{"## 1. Start: exec to ready", "## 2. Reload under load"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the table lacks %q:\n%s", want, stdout)
		}
	}
	if res.Start == nil || res.Start.Agent.N != 10 || res.Start.Baseline.N != 10 || res.Start.Agent.Median <= 0 {
		t.Errorf("start scenario: %+v, want 10 timed starts a side", res.Start)
	}
	if res.Start != nil && (res.Start.Floor.N != 10 || res.Start.Floor.Median <= 0) {
		t.Errorf("start scenario's floor: %+v, want 10 timed starts of the launcher", res.Start.Floor)
	}
	if res.Reload == nil {
		t.Fatalf("no reload scenario in results.json")
	}
	agentSide := res.Reload.Agent
	if agentSide.ChangesOK != 1 || agentSide.Load.Sent == 0 || agentSide.VersionsSeen != 2 {
		t.Errorf("agent reload: %d/1 changes worked, %d sent, %d versions answered; want 1, >0, 2", agentSide.ChangesOK, agentSide.Load.Sent, agentSide.VersionsSeen)
	}
	floor := res.Reload.BareHotRestart
	if floor.ChangesOK != 1 || floor.ValidateMs == nil || floor.HotRestartMs == nil || floor.HotRestartMs.Median <= 0 || floor.VersionsSeen != 2 {
		t.Errorf("bare hot restart: %d/1 changes worked, validate %v, hot restart %v, %d versions; want 1 timed change and 2 versions",
			floor.ChangesOK, floor.ValidateMs, floor.HotRestartMs, floor.VersionsSeen)
	}
	if d, ok := agentSide.Steps["hot_restart_ms"]; !ok || d.N != 1 {
		t.Errorf("the agent's reload breakdown: %v; want its one reload's steps from its log", agentSide.Steps)
	}
	for _, want := range []string{"Bare validate + hot restart", "≤ ×1.15", "≤ ×1.05", "the agent's own work"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the table lacks %q", want)
		}
	}
	svg, err := os.ReadFile(filepath.Join(out, "reload.svg"))
	if err != nil || !bytes.Contains(svg, []byte("<svg")) || !bytes.Contains(svg, []byte("succeeded")) {
		t.Errorf("reload.svg is not the plot (%v): %.200s", err, svg)
	}
}

// A smoke run of the in-place scenario at its smallest: one reload each
// way under load and one at scale (3 listeners); the in-place side takes
// its path with the same Envoy, the hot-restart side starts a new one.
func TestBenchInPlaceSmoke(t *testing.T) {
	if testing.Short() || envoykit.UnitTier() {
		t.Skip("the in-place smoke run takes about 25 s and runs the real Envoy: make test")
	}
	envoyBin, agent := smokeBinaries(t)
	_, stdout, res := runSmoke(t, "-agent", agent, "-envoy", envoyBin, "-reloads", "1", "-rate", "100",
		"-inplace-listeners", "3", "-scenarios", "inplace")
	r := res.InPlace
	if r == nil {
		t.Fatalf("no in-place scenario in results.json")
	}
	for _, tt := range []struct {
		name      string
		side      InPlaceSide
		step      string
		envoyPids int
	}{
		{"hot restart", r.HotRestart, "hot_restart_ms", 2},
		{"in place", r.InPlace, "in_place_ms", 1},
	} {
		s := tt.side
		if s.ChangesOK != 1 || s.PathTaken != 1 || s.Load.Sent == 0 || s.VersionsSeen != 2 {
			t.Errorf("%s: %d/1 reloads worked, %d took the path (%q), %d sent, %d versions answered; want 1, 1, >0, 2",
				tt.name, s.ChangesOK, s.PathTaken, s.OtherAnswer, s.Load.Sent, s.VersionsSeen)
		}
		if d, ok := s.Steps[tt.step]; !ok || d.N != 1 {
			t.Errorf("%s: the reload's steps %v lack %s", tt.name, s.Steps, tt.step)
		}
		if s.EnvoyPids != tt.envoyPids || s.SteadyRSSKiB <= 0 || s.PeakRSSKiB <= 0 || s.Idle.Sent == 0 {
			t.Errorf("%s: %d serving Envoys seen (want %d), RSS steady %d KiB, peak %d KiB, %d idle-connection requests",
				tt.name, s.EnvoyPids, tt.envoyPids, s.SteadyRSSKiB, s.PeakRSSKiB, s.Idle.Sent)
		}
	}
	for _, s := range []InPlaceScaleSide{r.ScaleHotRestart, r.ScaleInPlace} {
		if s.Listeners != 3 || s.ChangesOK != 1 || s.PathTaken != 1 || s.ChangeMs.N != 1 {
			t.Errorf("at scale, %s: %+v; want 3 listeners and 1 reload that took the path", s.Method, s)
		}
	}
	for _, want := range []string{"## 6. Reload in place against hot restart", "At scale: the agent on a bootstrap of 3 HTTP listeners", "in place 1 (pid unchanged): yes"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the table lacks %q:\n%s", want, stdout)
		}
	}
}

// A smoke run of the scale scenario at its smallest: 3 certificates, 3
// listeners, a run of 2 small starts. Every part gives its figures, each
// side beside the other; the agent's edits of a listener's route take the
// path in place with the same Envoy, and the renewal reaches new
// handshakes with no reload, while a bare Envoy, which reads a file-named
// certificate once, does not take it.
func TestBenchScaleSmoke(t *testing.T) {
	if testing.Short() || envoykit.UnitTier() {
		t.Skip("the scale smoke run takes about 40 s and runs the real Envoy: make test")
	}
	envoyBin, agent := smokeBinaries(t)
	_, stdout, res := runSmoke(t, "-agent", agent, "-envoy", envoyBin, "-scenarios", "scale", "-scale-certs", "3", "-scale-cert-starts", "1",
		"-scale-listeners", "3", "-scale-start-runs", "1", "-scale-starts-per-run", "2")
	s := res.Scale
	if s == nil {
		t.Fatalf("no scale scenario in results.json")
	}
	c := s.Certs
	if c.N != 3 || c.Agent.StartsOK != 1 || c.Bare.StartsOK != 1 || c.Agent.ServedMs.N != 1 || c.Bare.ReadyMs.Median <= 0 {
		t.Errorf("certificates: %+v; want one start each way that served every name", c)
	}
	if r := c.Agent.Renewal; r == nil || !r.Served || !r.SamePid || r.Reloads != 0 {
		t.Errorf("the agent's renewal: %+v; want it served, the same Envoy, no reload", r)
	}
	if r := c.Bare.Renewal; r == nil || r.Served {
		t.Errorf("the bare Envoy's renewal: %+v; want it not served (a file-named certificate is read once)", r)
	}
	l := s.Listeners
	if l.N != 3 || len(l.Edits) != 3 || l.AgentStartMs <= 0 || l.BareStartMs <= 0 {
		t.Fatalf("listeners: %+v; want 3 listeners, 3 edits, both starts", l)
	}
	for _, e := range l.Edits {
		if !e.Agent.Done || e.Agent.Path != "in place" || !e.Agent.SamePid || e.Agent.Load.Sent == 0 || e.Agent.Load.Failed != 0 {
			t.Errorf("the agent's edit of the %s listener: %+v; want it in place, the same Envoy, a load with 0 failed", e.Label, e.Agent)
		}
		if !e.Bare.Done || e.Bare.Ms <= 0 || e.Bare.Load.Sent == 0 {
			t.Errorf("the bare Envoy's edit of the %s listener: %+v; want it served, timed, under load", e.Label, e.Bare)
		}
	}
	if b := l.BootstrapEdit; !b.Done || !strings.HasPrefix(b.Path, "hot restart") || b.SamePid {
		t.Errorf("the edit outside the listeners: %+v; want a hot restart", b)
	}
	if st := s.SmallStart; st.Agent.N != 2 || st.Bare.N != 2 || len(st.RunRatios) != 1 {
		t.Errorf("small start: %+v; want 2 starts each, 1 run", st)
	}
	for _, want := range []string{"## 7. Scale", "**3 certificates named by file**", "**3 HTTP listeners**", "issue: 204 ms", "≤ ×1.20"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the table lacks %q:\n%s", want, stdout)
		}
	}
}

// steadyAndPeak splits the RSS samples at the first reload.
func TestSteadyAndPeak(t *testing.T) {
	t0 := time.Now()
	at := func(ms int, kib int) rssSample { return rssSample{t0.Add(time.Duration(ms) * time.Millisecond), kib} }
	tests := []struct {
		name         string
		samples      []rssSample
		steady, peak int
	}{
		{"none", nil, 0, 0},
		{"a hot restart doubles", []rssSample{at(-30, 100), at(-20, 110), at(-10, 105), at(0, 105), at(10, 210), at(20, 108)}, 105, 210},
		{"in place", []rssSample{at(-20, 100), at(-10, 102), at(10, 103), at(20, 101)}, 102, 103},
		{"no sample before", []rssSample{at(10, 100)}, 0, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			steady, peak := steadyAndPeak(tt.samples, t0)
			if steady != tt.steady || peak != tt.peak {
				t.Errorf("steady %d, peak %d; want %d, %d", steady, peak, tt.steady, tt.peak)
			}
		})
	}
}

// smokeBinaries are the real Envoy and the agent built from this tree, for
// a smoke run of the benchmark.
// runSmoke runs the benchmark with args and -out a folder of its own, and
// returns that folder, the table it printed and its results.json.
func runSmoke(t *testing.T, args ...string) (out, stdout string, res Results) {
	t.Helper()
	out = t.TempDir()
	var so, se bytes.Buffer
	if code := run(append(args, "-out", out), &so, &se); code != 0 {
		t.Fatalf("bench exited %d:\n%s", code, se.String())
	}
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("results.json: %v", err)
	}
	return out, so.String(), res
}

func smokeBinaries(t *testing.T) (envoyBin, agent string) {
	t.Helper()
	envoyBin, err := envoykit.FindEnvoy("")
	if err != nil {
		t.Fatal(err)
	}
	agent = filepath.Join(t.TempDir(), "envoy-agent")
	if out, err := exec.Command("go", "build", "-o", agent, "../cmd/envoy-agent").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return envoyBin, agent
}
