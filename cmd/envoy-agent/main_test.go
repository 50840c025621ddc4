//go:build linux

package main

// End-to-end tests: the envoy-agent binary, built once, runs a real Envoy
// with a real unix datagram socket as NOTIFY_SOCKET.

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// noticeBound is how soon after Envoy dies the agent must have exited. The
// agent reaps Envoy at once (it is Envoy's parent, waiting on it); the
// bound is for a busy machine, where the agent may wait for a core: 1s
// failed with the load average at 14 on 2 cores (1.05s seen).
const noticeBound = 3 * time.Second

func TestReadyOnlyAfterEnvoyIsLive(t *testing.T) {
	t.Parallel()
	// Envoy stays INITIALIZING for 2s: CDS from an xDS server that is not there.
	p := startAgent(t, procOptions{bootstrap: envoykit.BootstrapOptions{InitDelay: 2 * time.Second}, noWaitReady: true})
	var last503, first200 time.Time
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for {
			select {
			case <-stop:
				return
			default:
			}
			// A 503 proves Envoy was not LIVE when the probe was sent (it may
			// have turned LIVE before the answer came back).
			sent := time.Now()
			r, err := envoykit.Get(envoykit.URL(p.ports.Admin, "/ready"), time.Second)
			now := time.Now()
			if err == nil && r.Code == 503 {
				last503 = sent
			}
			if err == nil && r.Code == 200 && first200.IsZero() {
				first200 = now
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	ready := p.waitReady()
	if r, err := envoykit.Get(envoykit.URL(p.ports.Admin, "/ready"), time.Second); err != nil || r.Code != 200 || r.Body != "LIVE\n" {
		t.Errorf("right after READY=1 Envoy's /ready = %+v, %v; want 200 LIVE", r, err)
	}
	time.Sleep(100 * time.Millisecond)
	close(stop)
	<-polled
	if last503.IsZero() {
		t.Fatalf("the test never saw Envoy INITIALIZING; the init delay did not work")
	}
	if !ready.At.After(last503) {
		t.Errorf("READY=1 at %s came before Envoy's /ready last said 503 at %s", ready.At.Format(time.StampMicro), last503.Format(time.StampMicro))
	}
	if lag := ready.At.Sub(first200); lag > 250*time.Millisecond {
		t.Errorf("READY=1 came %s after Envoy's /ready first said 200; want within a poll interval", lag)
	}
	if d := ready.At.Sub(p.started); d < 1500*time.Millisecond {
		t.Errorf("READY=1 after %s, before the 2s initialisation could end", d)
	}
	// STATUS= told what Envoy was doing meanwhile.
	var statuses []string
	for _, m := range p.ns.Messages() {
		for _, l := range strings.Split(m.Text, "\n") {
			if s, ok := strings.CutPrefix(l, "STATUS="); ok {
				statuses = append(statuses, s)
			}
		}
	}
	joined := strings.Join(statuses, " | ")
	for _, want := range []string{"starting Envoy", "to be LIVE: PRE_INITIALIZING", "live: Envoy pid"} {
		if !strings.Contains(joined, want) {
			t.Errorf("STATUS lines %q lack %q", joined, want)
		}
	}
	if code := p.healthz(); code != 200 {
		t.Errorf("/healthz/ready = %d while live, want 200", code)
	}
}

func TestWatchdogFollowsEnvoy(t *testing.T) {
	t.Parallel()
	p := startAgent(t, procOptions{watchdogUsec: 1_000_000})
	time.Sleep(2 * time.Second)
	now := time.Now()
	n := p.ns.Count("WATCHDOG=1", now.Add(-2*time.Second), now)
	if n < 3 || n > 6 {
		t.Fatalf("%d WATCHDOG=1 in 2s with WatchdogSec=1s; want about 4 (every 500ms)", n)
	}
	if err := syscall.Kill(p.envoyPid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	time.Sleep(3 * time.Second)
	if n := p.ns.Count("WATCHDOG=1", frozen.Add(1100*time.Millisecond), time.Now()); n != 0 {
		t.Fatalf("%d WATCHDOG=1 while Envoy was frozen", n)
	}
	if code := p.healthz(); code == 200 {
		t.Errorf("/healthz/ready = 200 while Envoy is frozen")
	}
	if err := syscall.Kill(p.envoyPid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	thawed := time.Now()
	time.Sleep(2 * time.Second)
	if n := p.ns.Count("WATCHDOG=1", thawed, time.Now()); n < 2 {
		t.Fatalf("%d WATCHDOG=1 in 2s after Envoy was thawed; want the pings back", n)
	}
}

func TestStopDrainsWithRequestInFlight(t *testing.T) {
	t.Parallel()
	p := startAgent(t, procOptions{agent: map[string]string{"exit_on_zero_active_connections": "true", "min_drain_duration": `"1s"`, "termination_drain_duration": `"15s"`}})
	type res struct {
		r   envoykit.Response
		err error
	}
	reqDone := make(chan res, 1)
	go func() {
		r, err := envoykit.Get(envoykit.URL(p.ports.Listener, "/slow?d=2s"), 30*time.Second)
		reqDone <- res{r, err}
	}()
	if !envoykit.Eventually(10*time.Second, func() bool { return p.upstream.SlowInFlight() == 1 }) {
		t.Fatalf("the slow request never reached the upstream")
	}
	// Kept-alive connections to the agent's own ports (NewAgent's
	// statusPort and prometheusPort): the agent serves them, not Envoy, so
	// the drain's count leaves them out and they do not hold the stop to
	// termination_drain_duration (the bound on took below).
	for _, port := range []int{p.ports.Status, p.ports.Prometheus} {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "GET /healthz/ready HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("port %d: %v", port, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.Close {
			t.Fatalf("port %d closed the connection after its answer; the check needs it kept alive", port)
		}
	}
	sent := p.signal(syscall.SIGTERM)
	p.ns.WaitFor(t, "STOPPING=1", 2*time.Second)
	if !envoykit.Eventually(3*time.Second, func() bool { return p.ns.Count("EXTEND_TIMEOUT_USEC=", sent, time.Now()) > 0 }) {
		t.Errorf("no EXTEND_TIMEOUT_USEC= after SIGTERM")
	}
	if !envoykit.Eventually(3*time.Second, func() bool {
		for _, m := range p.ns.Messages() {
			if strings.Contains(m.Text, "STATUS=draining: 1 active connections") {
				return true
			}
		}
		return false
	}) {
		t.Errorf("no STATUS=draining with the connection count: %v", p.ns.Messages())
	}
	if code := p.healthz(); code != 503 {
		t.Errorf("/healthz/ready = %d while draining, want 503", code)
	}
	if r, err := envoykit.Get(envoykit.URL(p.ports.Admin, "/ready"), time.Second); err != nil || r.Body != "DRAINING\n" {
		t.Errorf("Envoy's /ready = %+v, %v during the drain; want DRAINING (health checks failed)", r, err)
	}
	r := <-reqDone
	if r.err != nil || r.r.Code != 200 || r.r.Body != "slow ok\n" {
		t.Fatalf("the in-flight request: %+v, %v; want 200", r.r, r.err)
	}
	code, took := p.wait(sent, 20*time.Second)
	if code != 0 {
		t.Fatalf("agent exited %d after a drain, want 0", code)
	}
	if took < 1500*time.Millisecond || took > 10*time.Second {
		t.Errorf("the stop took %s; want about the 2s the request needed", took)
	}
	if !envoykit.Eventually(2*time.Second, func() bool { return !envoykit.Alive(p.envoyPid) }) {
		t.Errorf("envoy still alive after the agent exited")
	}
	for _, want := range []string{"draining envoy", "drain ended", "no active connections left"} {
		if !p.logged(want) {
			t.Errorf("the log lacks %q", want)
		}
	}
}

func TestSecondSigtermEndsTheDrain(t *testing.T) {
	t.Parallel()
	p := startAgent(t, procOptions{agent: map[string]string{"min_drain_duration": `"20s"`, "termination_drain_duration": `"20s"`}})
	sent := p.signal(syscall.SIGTERM)
	p.ns.WaitFor(t, "STOPPING=1", 2*time.Second)
	p.ns.WaitFor(t, "STATUS=draining:", 5*time.Second) // the drain is under way
	p.signal(syscall.SIGTERM)
	code, took := p.wait(sent, 10*time.Second)
	if code != 0 || took > 4*time.Second {
		t.Fatalf("exit %d after %s; want 0 soon after the second SIGTERM", code, took)
	}
}

func TestEnvoyKilledAgentExitsNonZero(t *testing.T) {
	t.Parallel()
	p := startAgent(t, procOptions{})
	killed := time.Now()
	if err := syscall.Kill(p.envoyPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	code, took := p.wait(killed, 10*time.Second)
	if code != 1 {
		t.Fatalf("agent exited %d when Envoy was killed, want 1", code)
	}
	if took > noticeBound {
		t.Errorf("agent exited %s after Envoy died; want promptly (within %s)", took, noticeBound)
	}
	if s := p.stderr.String(); !strings.Contains(s, "signal: killed") || !strings.Contains(s, "SIGKILL") {
		t.Errorf("stderr does not say Envoy was killed:\n%s", s)
	}
}

func TestQuitquitquitExitsWithoutDrain(t *testing.T) {
	t.Parallel()
	p := startAgent(t, procOptions{agent: map[string]string{"min_drain_duration": `"20s"`, "termination_drain_duration": `"20s"`}})
	if code, err := controlRequest(p.controlSocket(), http.MethodGet, "/quitquitquit"); err != nil || code != 405 {
		t.Fatalf("GET /quitquitquit = %d, %v; want 405", code, err)
	}
	if code, err := statusPost(p.ports.Status, "/quitquitquit"); err != nil || code != 404 {
		t.Fatalf("POST /quitquitquit on the status port = %d, %v; want 404 (control is on the socket only)", code, err)
	}
	sent := time.Now()
	if code := p.post("/quitquitquit"); code != 200 {
		t.Fatalf("POST /quitquitquit = %d", code)
	}
	code, took := p.wait(sent, 10*time.Second)
	if code != 0 || took > 3*time.Second {
		t.Fatalf("exit %d after %s; want 0 at once", code, took)
	}
}

func TestDrainThenSigtermExitsAtOnce(t *testing.T) {
	t.Parallel()
	p := startAgent(t, procOptions{agent: map[string]string{"min_drain_duration": `"20s"`, "termination_drain_duration": `"20s"`}})
	if code := p.post("/drain"); code != 200 {
		t.Fatalf("POST /drain = %d", code)
	}
	if code := p.healthz(); code != 503 {
		t.Errorf("/healthz/ready = %d after /drain, want 503", code)
	}
	if r, err := envoykit.Get(envoykit.URL(p.ports.Listener, "/"), 5*time.Second); err != nil || r.Code != 200 {
		t.Errorf("the listener after /drain: %+v, %v; want it still serving", r, err)
	}
	sent := p.signal(syscall.SIGTERM)
	code, took := p.wait(sent, 10*time.Second)
	if code != 0 || took > 3*time.Second {
		t.Fatalf("exit %d after %s; want 0 at once", code, took)
	}
}

func TestSigkillOfAgentLeavesNoEnvoy(t *testing.T) {
	t.Parallel()
	p := startAgent(t, procOptions{})
	p.signal(syscall.SIGKILL)
	<-p.done
	if !envoykit.Eventually(3*time.Second, func() bool { return !envoykit.Alive(p.envoyPid) }) {
		t.Fatalf("envoy pid %d survived a SIGKILL of its agent", p.envoyPid)
	}
}

func TestSigtermBeforeReadyStopsQuickly(t *testing.T) {
	t.Parallel()
	p := startAgent(t, procOptions{bootstrap: envoykit.BootstrapOptions{InitDelay: 10 * time.Second}, noWaitReady: true})
	p.ns.WaitFor(t, "STATUS=waiting for Envoy", 10*time.Second)
	sent := p.signal(syscall.SIGTERM)
	code, took := p.wait(sent, 10*time.Second)
	if code != 0 || took > 3*time.Second {
		t.Fatalf("exit %d after %s; want 0 at once", code, took)
	}
	assertNoEnvoyFor(t, p.dir)
}

func TestStartTimeout(t *testing.T) {
	t.Parallel()
	// 3s: with 1s, a loaded machine (load average 20 on 2 cores) had Envoy's
	// admin not yet up at the timeout ("its state: not started").
	p := startAgent(t, procOptions{bootstrap: envoykit.BootstrapOptions{InitDelay: 20 * time.Second}, agent: map[string]string{"start_timeout": `"3s"`}, noWaitReady: true})
	code, took := p.wait(p.started, 20*time.Second)
	if code != 1 || took > 12*time.Second {
		t.Fatalf("exit %d after %s; want 1 soon after the 3s start timeout", code, took)
	}
	if !p.logged("was not LIVE within start_timeout 3s (its state: PRE_INITIALIZING)") {
		t.Errorf("stderr lacks the reason:\n%s", p.stderr)
	}
	assertNoEnvoyFor(t, p.dir)
}

func TestMetricsMergeEnvoyAndAgent(t *testing.T) {
	t.Parallel()
	p := startAgent(t, procOptions{})
	r, err := envoykit.Get(envoykit.URL(p.ports.Prometheus, "/stats/prometheus"), 5*time.Second)
	if err != nil || r.Code != 200 {
		t.Fatalf("GET /stats/prometheus: %+v %v", r.Code, err)
	}
	for _, want := range []string{"\nenvoy_server_live{} 1", "\nenvoy_agent_envoy_live 1", "\nenvoy_agent_start_seconds ", "\nprocess_resident_memory_bytes "} {
		if !strings.Contains(r.Body, want) {
			t.Errorf("metrics lack %q", strings.TrimSpace(want))
		}
	}
	if ct := r.Header.Get("Content-Type"); ct != "text/plain; version=0.0.4; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	// The agent's metrics, each once and typed (its metrics library writes TYPE lines only
	// when asked to).
	for name, typ := range map[string]string{
		"envoy_agent_envoy_live": "gauge", "envoy_agent_draining": "gauge", "envoy_agent_envoy_epoch": "gauge",
		"envoy_agent_start_seconds": "gauge", "envoy_agent_drain_seconds": "gauge",
		"envoy_agent_last_reload_seconds": "gauge", "envoy_agent_reloads_total": "counter",
		"envoy_agent_reload_failures_total": "counter", "process_resident_memory_bytes": "gauge",
	} {
		if n := strings.Count(r.Body, "\n# TYPE "+name+" "); n != 1 {
			t.Errorf("%d TYPE lines for %s", n, name)
		} else if !strings.Contains(r.Body, "\n# TYPE "+name+" "+typ+"\n") {
			t.Errorf("%s is not typed %s", name, typ)
		}
		if n := strings.Count(r.Body, "\n"+name+" "); n != 1 {
			t.Errorf("%d samples of %s", n, name)
		}
	}
}

func TestOneProcessorUnlessTheOperatorSetsGOMAXPROCS(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(before) })
	tests := []struct {
		name, env string
		start     int
		want      int
	}{
		{"unset: one processor", "", 4, 1},
		{"set by the operator: kept", "3", 3, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("GOMAXPROCS", tt.env)
			runtime.GOMAXPROCS(tt.start)
			oneProcessor()
			if got := runtime.GOMAXPROCS(0); got != tt.want {
				t.Fatalf("GOMAXPROCS=%q: %d processors after oneProcessor, want %d", tt.env, got, tt.want)
			}
		})
	}
}
