//go:build linux

package main

// The reload guard against the real Envoy, under a load of one request at
// a time that does not retry (envoykit's RawHTTP1): a bad reload rolled
// back, in place and by hot restart; good reloads under a background of
// 5xx kept; a dry run and validate --plan changing nothing.

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// guardAgent is an agent with reload_method "auto", quick drains and the
// reload guard watching each reload for window.
func guardAgent(t *testing.T, window string) (*agentProc, string) {
	t.Helper()
	return guardAgentWith(t, window, quickDrain)
}

// guardAgentWith is guardAgent with envoyKeys over the harness's [envoy]
// (nil: its drain of 10 s, its parent shutdown at 15 s).
func guardAgentWith(t *testing.T, window string, envoyKeys map[string]string) (*agentProc, string) {
	t.Helper()
	bo := envoykit.BootstrapOptions{ResponseHeader: "v0"}
	p := startAgent(t, procOptions{envoy: envoyKeys, bootstrap: bo,
		agent: map[string]string{"reload_method": `"auto"`, "reload_guard": strconv.Quote(window)}})
	bo.Ports = p.ports
	text, err := envoykit.RenderBootstrap(bo)
	if err != nil {
		t.Fatal(err)
	}
	return p, string(text)
}

// toRefusingCluster is text with / routed to a new cluster whose endpoint
// refuses connections (a port nothing listens on): a valid edit that
// every check of a reload passes.
func toRefusingCluster(t *testing.T, text string) string {
	t.Helper()
	dead := envoykit.FreePort(t)
	text = strings.Replace(text, "route: { cluster: upstream, timeout: 0s }", "route: { cluster: dead, timeout: 0s }", 1)
	return strings.Replace(text, "  clusters:\n", fmt.Sprintf(`  clusters:
  - name: dead
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: dead
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: %d } } } }] }]
`, dead), 1)
}

// guardStatus is what these tests read of `status --json`.
type guardStatus struct {
	LastReload struct {
		At       string `json:"at"`
		Outcome  string `json:"outcome"`
		Path     string `json:"path"`
		Epoch    int    `json:"epoch"`
		Rollback *struct {
			At       string `json:"at"`
			Reason   string `json:"reason"`
			Path     string `json:"path"`
			TookMs   int64  `json:"took_ms"`
			Error    string `json:"error"`
			Findings []struct {
				Signal, Subject, Before, After string
			} `json:"findings"`
		} `json:"rollback"`
	} `json:"last_reload"`
	Reloads struct {
		RolledBack int `json:"rolled_back"`
	} `json:"reloads"`
	Files struct {
		State  string `json:"state"`
		Reason string `json:"reason"`
	} `json:"files"`
}

func (p *agentProc) guardStatus() guardStatus {
	p.t.Helper()
	code, stdout, stderr := runAgent(p.t, "status", "--json", "--config", p.config)
	var st guardStatus
	if err := json.Unmarshal([]byte(stdout), &st); code != 0 || err != nil {
		p.t.Fatalf("status --json: exit %d, %v: %s%s", code, err, stdout, stderr)
	}
	return st
}

func parseTime(t *testing.T, s string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("time %q: %v", s, err)
	}
	return at
}

// checkRollback checks the status after a rollback by path and returns
// the reload's start, when the regression was called and when the
// configuration before served again.
func checkRollback(t *testing.T, st guardStatus, path string) (reload, called, done time.Time) {
	t.Helper()
	lr := st.LastReload
	rb := lr.Rollback
	if lr.Outcome != "rolled_back" || rb == nil || rb.Error != "" || rb.Path != path || rb.Reason == "" || len(rb.Findings) == 0 {
		t.Fatalf("status last_reload %+v, rollback %+v: want rolled back %s with a reason", lr, rb, path)
	}
	if st.Files.State != "differ" || !strings.Contains(st.Files.Reason, "was rolled back by the reload guard") || st.Reloads.RolledBack != 1 {
		t.Errorf("status files %+v, reloads %+v", st.Files, st.Reloads)
	}
	reload, called = parseTime(t, lr.At), parseTime(t, rb.At)
	done = called.Add(time.Duration(rb.TookMs) * time.Millisecond)
	var fired []string
	for _, f := range rb.Findings {
		fired = append(fired, f.Signal)
	}
	t.Logf("regression called %s after the reload began (%s), rolled back %s later: %s", called.Sub(reload).Round(time.Millisecond),
		strings.Join(fired, ", "), time.Duration(rb.TookMs)*time.Millisecond, rb.Reason)
	return reload, called, done
}

// servedAfterRollback holds the load l to the rollback that ended at done:
// 500 more answers, none of the requests sent from done on failed, and the
// configuration from before (v0) serving.
func servedAfterRollback(t *testing.T, l *envoykit.Load, done time.Time) {
	t.Helper()
	envoykit.WaitAnswers(t, l, 500)
	samples := l.Stop()
	sent, failed, why := failedAfter(l, samples, done)
	t.Logf("load: %d ok, %d failed in all; after the rollback %d sent, %d failed %v", l.OK(), l.Failed(), sent, failed, why)
	if failed != 0 || sent < 500 {
		t.Errorf("after the rollback %d of %d requests failed (%v), want 0 of at least 500", failed, sent, why)
	}
	if v := l.Latest(); v != "v0" {
		t.Errorf("after the rollback Envoy answers %q, want v0", v)
	}
}

// failedAfter counts the load's failed requests sent after at.
func failedAfter(l *envoykit.Load, samples []envoykit.Sample, at time.Time) (sent, failed int, why []string) {
	for _, s := range samples {
		if l.Start().Add(s.At).Before(at) {
			continue
		}
		sent++
		if !s.OK {
			failed++
			why = append(why, s.Err)
		}
	}
	return sent, failed, why
}

// TestGuardRollsBackARouteToARefusingCluster: with reload_guard "10s", a
// reload in place that sends / to a cluster whose endpoint refuses
// connections is rolled back in place within 12 s of the reload, by the
// same Envoy process; after the rollback no request fails; `reload
// --wait` exits 5; status --json says rolled_back with the reason; a
// reload of the same files is refused (exit 3) unless --force.
func TestGuardRollsBackARouteToARefusingCluster(t *testing.T) {
	t.Parallel()
	p, good := guardAgent(t, "10s")
	pid := p.servingPid()
	l := envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: envoykit.URL(p.ports.Listener, "/"), Client: envoykit.RawHTTP1,
		Workers: []envoykit.Workers{{N: 1, Path: "/"}}})
	defer l.Stop()
	envoykit.WaitAnswers(t, l, 1500) // a baseline of a few of the guard's reads

	p.writeBootstrapText(toRefusingCluster(t, good))
	code, stdout, stderr := runAgent(t, "reload", "--wait", "--config", p.config)
	if code != exitRolledBack || !strings.Contains(stderr, "the reload guard rolled the reload back") || !strings.Contains(stdout, "the reload guard watches Envoy's traffic until") {
		t.Fatalf("reload --wait of the bad edit: exit %d: %s%s", code, stdout, stderr)
	}
	t.Logf("reload --wait said: %s", strings.TrimSpace(stdout+stderr))
	st := p.guardStatus()
	reload, _, done := checkRollback(t, st, "in_place")
	if took := done.Sub(reload); took > 12*time.Second {
		t.Errorf("rolled back %s after the reload began, want within 12 s", took.Round(time.Millisecond))
	}
	if got := p.servingPid(); got != pid {
		t.Errorf("Envoy pid %d serves after the in-place rollback, want %d", got, pid)
	}
	servedAfterRollback(t, l, done)
	if got := p.metric("envoy_agent_reload_rollbacks_total"); got != "1" {
		t.Errorf("envoy_agent_reload_rollbacks_total = %q, want 1", got)
	}
	if !p.logged("reload guard: rolled back the reload") || !strings.Contains(p.stderr.String(), "signal=downstream_5xx") {
		t.Errorf("no warning of the rollback with its signal in the log")
	}

	code, out := p.reload()
	if code != exitBadConfig || !strings.Contains(out, "were rolled back by the reload guard at") {
		t.Errorf("a reload of the rolled-back files: exit %d: %s; want 3 naming the rollback", code, out)
	}
	p.writeBootstrapText(good)
	if code, out := p.reload(); code != 0 {
		t.Errorf("a reload of the files from before: exit %d: %s", code, out)
	}
}

// TestGuardRollsBackAHotRestart: a reload by hot restart (the node
// changes) that routes / to a refusing cluster is rolled back by a hot
// restart to the configuration before, once the epoch the reload replaced
// has drained: an 8 s request in flight on that epoch finishes (a new
// epoch would have ended it at once); no request fails after the
// rollback.
func TestGuardRollsBackAHotRestart(t *testing.T) {
	t.Parallel()
	p, good := guardAgentWith(t, "10s", nil)
	l := envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: envoykit.URL(p.ports.Listener, "/"), Client: envoykit.RawHTTP1,
		Workers: []envoykit.Workers{{N: 1, Path: "/"}}})
	defer l.Stop()
	envoykit.WaitAnswers(t, l, 1500)
	slow := p.slowRequest(false, 8*time.Second)

	bad := strings.Replace(toRefusingCluster(t, good), "id: envoy-agent-kit", "id: envoy-agent-kit-2", 1)
	p.writeBootstrapText(bad)
	code, stdout, stderr := runAgent(t, "reload", "--wait", "--config", p.config)
	if code != exitRolledBack || !strings.Contains(stdout, "reloaded (epoch 1)") || !strings.Contains(stderr, "rolled the reload back") {
		t.Fatalf("reload --wait of the bad edit: exit %d: %s%s", code, stdout, stderr)
	}
	st := p.guardStatus()
	_, called, done := checkRollback(t, st, "hot_restart")
	if st.LastReload.Epoch != 2 {
		t.Errorf("epoch %d serves after the rollback, want 2", st.LastReload.Epoch)
	}
	r := <-slow
	r.check(t, "the 8 s request in flight on the epoch the reload replaced")
	t.Logf("the rollback waited %s for the epoch the reload replaced; its 8 s request took %s", done.Sub(called).Round(time.Millisecond), r.took.Round(time.Millisecond))
	servedAfterRollback(t, l, done)
}

// goodReloads is how many good reloads TestGuardKeepsGoodReloads makes.
const goodReloads = 20

// TestGuardKeepsGoodReloads: good edits (a response header; every fifth
// also the node, a hot restart) under the same load, with the upstream
// answering 1 % of the requests 503, are never rolled back.
func TestGuardKeepsGoodReloads(t *testing.T) {
	t.Parallel()
	p, good := guardAgent(t, "5s")
	p.upstream.FailEvery(100)
	l := envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: envoykit.URL(p.ports.Listener, "/"), Client: envoykit.RawHTTP1,
		Workers: []envoykit.Workers{{N: 1, Path: "/"}}})
	defer l.Stop()
	envoykit.WaitAnswers(t, l, 300)
	kept := 0
	for i := 1; i <= goodReloads; i++ {
		text := strings.Replace(good, `value: "v0"`, fmt.Sprintf(`value: "v%d"`, i), 1)
		if i%5 == 0 {
			text = strings.Replace(text, "id: envoy-agent-kit", fmt.Sprintf("id: envoy-agent-kit-%d", i), 1)
		}
		p.writeBootstrapText(text)
		code, stdout, stderr := runAgent(t, "reload", "--wait", "--config", p.config)
		if code != 0 || !strings.Contains(stdout, "reload guard: no regression over") {
			t.Errorf("good reload %d: exit %d: %s%s", i, code, stdout, stderr)
			continue
		}
		kept++
		for _, line := range strings.Split(stdout, "\n") {
			if strings.Contains(line, "reload guard: no regression") {
				t.Logf("reload %d: %s", i, strings.TrimSpace(line))
			}
		}
	}
	l.Stop()
	t.Logf("%d of %d good reloads kept; load %d ok, %d failed (%.2f %%, the upstream's 1 %%)", kept, goodReloads, l.OK(), l.Failed(),
		100*float64(l.Failed())/float64(max(l.OK()+l.Failed(), 1)))
	if got := p.metric("envoy_agent_reload_rollbacks_total"); got != "0" {
		t.Errorf("envoy_agent_reload_rollbacks_total = %q after %d good reloads, want 0", got, goodReloads)
	}
}

// runDirFiles is every file under the run folder with its SHA-256.
func runDirFiles(t *testing.T, dir string) map[string][sha256.Size]byte {
	t.Helper()
	out := map[string][sha256.Size]byte{}
	err := filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err != nil || !fi.Mode().IsRegular() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		out[path] = sha256.Sum256(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestReloadDryRun: `reload --dry-run` of an edit prints its plan (the
// path with its reason, the resources) and leaves the Envoy pid, the
// served configuration and the files in run_dir as they were; `validate
// --plan` of a candidate elsewhere asks the same agent; a dry run of a
// bootstrap Envoy rejects exits 3.
func TestReloadDryRun(t *testing.T) {
	t.Parallel()
	p, good := guardAgent(t, "10s")
	pid := p.servingPid()
	run := filepath.Join(p.dir, "run")
	dump := func() string { // its maps' keys sorted: Envoy writes some in no set order
		r, err := envoykit.Get(envoykit.URL(p.ports.Admin, "/config_dump"), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var doc any
		if err := json.Unmarshal([]byte(r.Body), &doc); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(doc)
		return string(b)
	}
	files, served := runDirFiles(t, run), dump()

	edit := strings.Replace(toRefusingCluster(t, good), `value: "v0"`, `value: "v1"`, 1)
	p.writeBootstrapText(edit)
	code, stdout, stderr := runAgent(t, "reload", "--dry-run", "--config", p.config)
	t.Logf("reload --dry-run (in place):\n%s%s", stdout, stderr)
	for _, want := range []string{"plan: in place: epoch 0 (pid " + strconv.Itoa(pid) + ") would keep serving", "routes:    changed ingress/0/0", "clusters:  added dead"} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("reload --dry-run: exit %d, want %q in: %s%s", code, want, stdout, stderr)
		}
	}
	hot := strings.Replace(edit, "id: envoy-agent-kit", "id: envoy-agent-kit-2", 1)
	p.writeBootstrapText(hot)
	code, stdout, stderr = runAgent(t, "reload", "--dry-run", "--config", p.config)
	t.Logf("reload --dry-run (hot restart):\n%s%s", stdout, stderr)
	if code != 0 || !strings.Contains(stdout, "plan: hot restart: epoch 1 would replace epoch 0") || !strings.Contains(stdout, "node changed") || !strings.Contains(stdout, "clusters:  added dead") {
		t.Errorf("reload --dry-run of a node change: exit %d: %s%s", code, stdout, stderr)
	}

	// A candidate elsewhere, as the Ansible role's check mode has it.
	cand := t.TempDir()
	if err := os.WriteFile(filepath.Join(cand, "envoy.yaml"), []byte(edit), 0o600); err != nil {
		t.Fatal(err)
	}
	toml := strings.Replace(readFileT(t, p.config), strconv.Quote(filepath.Join(p.dir, "envoy.yaml")), strconv.Quote(filepath.Join(cand, "envoy.yaml")), 1)
	toml = strings.Replace(toml, `run_dir = "run"`, "run_dir = "+strconv.Quote(run), 1)
	if err := os.WriteFile(filepath.Join(cand, "config.toml"), []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runAgent(t, "validate", "--plan", "--config", filepath.Join(cand, "config.toml"))
	t.Logf("validate --plan:\n%s%s", stdout, stderr)
	if code != 0 || !strings.Contains(stdout, "OK: ") || !strings.Contains(stdout, "by the agent running "+p.config) || !strings.Contains(stdout, "plan: in place") || !strings.Contains(stdout, "clusters:  added dead") {
		t.Errorf("validate --plan of a candidate: exit %d: %s%s", code, stdout, stderr)
	}

	p.writeBootstrapText(strings.Replace(good, "connect_timeout: 1s", "connect_timeout: -1s", 1))
	if code, stdout, stderr := runAgent(t, "reload", "--dry-run", "--config", p.config); code != exitBadConfig || !strings.Contains(stderr, "a reload would be refused") {
		t.Errorf("reload --dry-run of a bootstrap Envoy rejects: exit %d: %s%s", code, stdout, stderr)
	}

	if got := p.servingPid(); got != pid {
		t.Errorf("Envoy pid %d after the dry runs, want %d", got, pid)
	}
	if now := dump(); now != served {
		t.Errorf("Envoy's configuration changed with the dry runs")
	}
	now := runDirFiles(t, run)
	var changed []string
	for f, sum := range now {
		if before, ok := files[f]; !ok || before != sum {
			changed = append(changed, f)
		}
	}
	for f := range files {
		if _, ok := now[f]; !ok {
			changed = append(changed, f)
		}
	}
	slices.Sort(changed)
	if len(changed) > 0 {
		t.Errorf("the dry runs changed these files in run_dir: %v", changed)
	}
	if p.metric("envoy_agent_reloads_in_place_total{outcome=\"ok\"}") != "0" || p.metric("envoy_agent_reloads_total") != "0" {
		t.Errorf("a dry run counted as a reload")
	}
}
