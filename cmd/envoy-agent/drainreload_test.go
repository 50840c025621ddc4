//go:build linux

package main

// Reloads and stops with requests in flight on an epoch that a hot restart
// replaced, seen by clients that do not retry.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// slowDrain keeps a replaced epoch for long: 10s drain, told to exit at 15s.
var slowDrain = map[string]string{"drain_duration": `"10s"`, "parent_shutdown_duration": `"15s"`}

type slowResult struct {
	code int
	body string
	err  error
	took time.Duration
}

// slowRequest starts a GET /slow?d=… on a connection of its own, over
// HTTP/1.1 or HTTP/2 (h2c), and waits until the upstream holds it.
func (p *agentProc) slowRequest(h2 bool, d time.Duration) <-chan slowResult {
	p.t.Helper()
	before := p.upstream.SlowInFlight()
	out := make(chan slowResult, 1)
	url := envoykit.URL(p.ports.Listener, "/slow?d="+d.String())
	go func() {
		start := time.Now()
		client := &http.Client{Timeout: 40 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		if h2 {
			client = envoykit.NewH2CClient(40 * time.Second)
		}
		resp, err := client.Get(url)
		if err != nil {
			out <- slowResult{err: err, took: time.Since(start)}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && h2 && resp.ProtoMajor != 2 {
			err = fmt.Errorf("answered over %s", resp.Proto)
		}
		out <- slowResult{code: resp.StatusCode, body: string(b), err: err, took: time.Since(start)}
	}()
	if !envoykit.Eventually(10*time.Second, func() bool { return p.upstream.SlowInFlight() > before }) {
		p.t.Fatalf("the slow request never reached the upstream")
	}
	return out
}

func (r slowResult) check(t *testing.T, what string) {
	t.Helper()
	if r.err != nil || r.code != 200 || r.body != "slow ok\n" {
		t.Errorf("%s: %d %q %v after %s; want 200 slow ok", what, r.code, r.body, r.err, r.took.Round(time.Millisecond))
	}
}

// Issue 14, item 3: with exit_on_zero_active_connections, a stop right
// after a reload counted only the new epoch's connections and cut the
// request the old epoch was still serving.
func TestStopRightAfterReloadWaitsForTheOldEpochsRequest(t *testing.T) {
	t.Parallel()
	p := startAgent(t, procOptions{envoy: slowDrain, bootstrap: envoykit.BootstrapOptions{ResponseHeader: "v0"},
		agent: map[string]string{"exit_on_zero_active_connections": "true", "min_drain_duration": `"1s"`, "termination_drain_duration": `"20s"`}})
	req := p.slowRequest(false, 5*time.Second)
	p.rewriteBootstrap(envoykit.BootstrapOptions{ResponseHeader: "v1"})
	if code, out := p.reload(); code != 0 {
		t.Fatalf("reload: exit %d: %s", code, out)
	}
	sent := p.signal(syscall.SIGTERM)
	if !envoykit.Eventually(5*time.Second, func() bool { return p.ns.Count("STATUS=draining: 1 active connections", sent, time.Now()) > 0 }) {
		t.Errorf("the drain never counted the old epoch's connection: %v", p.ns.Messages())
	}
	r := <-req
	r.check(t, "the request on the old epoch")
	code, _ := p.wait(sent, 30*time.Second)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	if !p.logged("no active connections left") {
		t.Errorf("the drain did not end at zero connections")
	}
}

// Issue 14, item 4: a second reload 2s after the first ended the first
// reload's draining epoch at once (Envoy keeps two generations), cutting
// its 8s request. Now the second reload waits for it, and says so.
func TestBackToBackReloadsKeepTheDrainingEpochsRequest(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		name := map[bool]string{false: "HTTP/1.1", true: "HTTP/2"}[h2]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := startAgent(t, procOptions{envoy: slowDrain, bootstrap: envoykit.BootstrapOptions{ResponseHeader: "v0"}})
			req := p.slowRequest(h2, 8*time.Second)
			p.rewriteBootstrap(envoykit.BootstrapOptions{ResponseHeader: "v1"})
			if code, out := p.reload(); code != 0 {
				t.Fatalf("first reload: exit %d: %s", code, out)
			}
			// The scenario: the second reload comes 2s after the first.
			time.Sleep(2 * time.Second)
			p.rewriteBootstrap(envoykit.BootstrapOptions{ResponseHeader: "v2"})
			second := time.Now()
			code, out := p.reload()
			if code != 0 || !strings.Contains(out, "reloaded: epoch 2 is serving") || !strings.Contains(out, "for epoch 0 (pid") {
				t.Errorf("second reload: exit %d: %s; want epoch 2, having waited for epoch 0", code, out)
			}
			r := <-req
			r.check(t, "the 8s request on epoch 0")
			if time.Since(second) < 2*time.Second {
				t.Errorf("the second reload returned %s after it was asked; it cannot have waited for the request", time.Since(second))
			}
			if p.ns.Count("STATUS=live: Envoy pid", second, time.Now()) == 0 || !statusSaid(p, "reload waiting for epoch 0") {
				t.Errorf("STATUS= never said the reload was waiting: %v", p.ns.Messages())
			}
			if rr, err := envoykit.Get(envoykit.URL(p.ports.Listener, "/"), 5*time.Second); err != nil || rr.Header.Get("x-config-version") != "v2" {
				t.Errorf("after the second reload: %+v %v; want v2", rr, err)
			}
		})
	}
}

func statusSaid(p *agentProc, s string) bool {
	for _, m := range p.ns.Messages() {
		if strings.Contains(m.Text, s) {
			return true
		}
	}
	return false
}

// Issue 14, item 7: what clients that do not retry see across reloads:
// busy keep-alive connections, idle keep-alive connections, long
// requests, over HTTP/1.1 (raw, like Python's http.client) and HTTP/2.
func TestReloadsSeenByClientsThatDoNotRetry(t *testing.T) {
	t.Parallel()
	p := startAgent(t, procOptions{envoy: quickDrain, bootstrap: envoykit.BootstrapOptions{ResponseHeader: "v0"}})
	url := envoykit.URL(p.ports.Listener, "/")
	busy := envoykit.Workers{N: 2, Path: "/"}
	long := envoykit.Workers{N: 2, Path: "/slow?d=1500ms"}
	// Idle for less than parent_shutdown_duration (2s): the next request
	// reaches the replaced epoch, which answers it with Connection: close.
	shortIdle := envoykit.Workers{N: 4, Path: "/", Idle: 700 * time.Millisecond}
	// Idle for longer: the replaced epoch may exit (closing the connection)
	// before the next request, which then fails.
	longIdle := envoykit.Workers{N: 6, Path: "/", Idle: 2500 * time.Millisecond}
	load := func(c envoykit.ClientKind, w ...envoykit.Workers) *envoykit.Load {
		return envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: url, Client: c, Workers: w})
	}
	h1, h1idle := load(envoykit.RawHTTP1, busy, long, shortIdle), load(envoykit.RawHTTP1, longIdle)
	h2, h2idle := load(envoykit.H2C, busy, long), load(envoykit.H2C, longIdle)
	const reloads = 5
	for i := 1; i <= reloads; i++ {
		p.rewriteBootstrap(envoykit.BootstrapOptions{ResponseHeader: fmt.Sprintf("v%d", i)})
		if code, out := p.reload(); code != 0 {
			t.Fatalf("reload %d: exit %d: %s", i, code, out)
		}
	}
	// Let the last replaced epoch exit (parent_shutdown_duration 2s) while
	// the load runs: that is when idle connections are closed.
	if !envoykit.Eventually(20*time.Second, func() bool { return len(processesMentioning(p.dir+"/run/epoch-")) == 1 }) {
		t.Errorf("replaced epochs still running: %v", processesMentioning(p.dir))
	}
	for _, l := range []*envoykit.Load{h1, h1idle, h2, h2idle} {
		l.Stop()
	}
	t.Logf("%d reloads; HTTP/1.1 busy, long, and idle 0.7s: %s", reloads, h1)
	t.Logf("HTTP/1.1 idle 2.5s (parent_shutdown_duration 2s): %s; errors %q", h1idle, h1idle.Errors())
	t.Logf("HTTP/2 busy and long: %s; idle 2.5s: %s; errors %q %q", h2, h2idle, h2.Errors(), h2idle.Errors())
	if h1.OK() == 0 || h1idle.OK() == 0 || h2.OK() == 0 || h2idle.OK() == 0 {
		t.Fatalf("a load made no request: %s / %s / %s / %s", h1, h1idle, h2, h2idle)
	}
	if h1.Failed() != 0 {
		t.Errorf("busy, long or briefly idle HTTP/1.1 requests failed: %s %q", h1, h1.Errors())
	}
	if h2.Failed() != 0 {
		t.Errorf("busy or long HTTP/2 requests failed: %s %q", h2, h2.Errors())
	}
	// HTTP/2 connections idle across the replaced epoch's exit: Go's client
	// notices the close before reusing one, but on a busy machine a request
	// can race the GOAWAY and the close (seen in CI under stress-ng: 2 of 36,
	// "server sent GOAWAY and closed the connection"; and, with several idle
	// workers waking together on the shared connection, all of them: "force
	// closed via ClientConn.Close", 5 of 30 in a fresh-clone make test).
	// Allowed, on idle connections only (README, Reload).
	if h2idle.FailedInFlight() != 0 {
		t.Errorf("HTTP/2 idle-connection workers failed on fresh or busy connections: %s %q", h2idle, h2idle.Errors())
	}
	// HTTP/1.1 connections idle across the replaced epoch's exit: Envoy
	// closes them then, and a client that writes on one without checking
	// fails once (README, Reload). Such failures are allowed, only those.
	if h1idle.FailedInFlight() != 0 {
		t.Errorf("HTTP/1.1 idle-connection workers failed on fresh or busy connections: %s %q", h1idle, h1idle.Errors())
	}
}

// The core of the test above, without the connections left idle across
// a replaced epoch's exit (whose failures README allows and whose timing a
// slow machine, or make test-arm64's emulation, shifts): busy and long
// requests over HTTP/1.1 and HTTP/2 see no failure across hot-restart
// reloads, the new configuration answers, and the stop drains.
func TestReloadsUnderBusyLoadFailNothing(t *testing.T) {
	t.Parallel()
	p := startAgent(t, procOptions{envoy: quickDrain, bootstrap: envoykit.BootstrapOptions{ResponseHeader: "v0"}})
	workers := []envoykit.Workers{{N: 2, Path: "/"}, {N: 1, Path: "/slow?d=1500ms"}}
	url := envoykit.URL(p.ports.Listener, "/")
	h1 := envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: url, Client: envoykit.RawHTTP1, Workers: workers})
	h2 := envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: url, Client: envoykit.H2C, Workers: workers})
	const reloads = 3
	for i := 1; i <= reloads; i++ {
		p.rewriteBootstrap(envoykit.BootstrapOptions{ResponseHeader: fmt.Sprintf("v%d", i)})
		if code, out := p.reload(); code != 0 || !strings.Contains(out, fmt.Sprintf("reloaded: epoch %d is serving", i)) {
			t.Fatalf("reload %d: exit %d: %s", i, code, out)
		}
	}
	if !envoykit.Eventually(20*time.Second, func() bool { return len(processesMentioning(p.dir+"/run/epoch-")) == 1 }) {
		t.Errorf("replaced epochs still running: %v", processesMentioning(p.dir))
	}
	h1.Stop()
	h2.Stop()
	t.Logf("%d hot-restart reloads; HTTP/1.1 busy and long: %s; HTTP/2 busy and long: %s", reloads, h1, h2)
	if h1.OK() == 0 || h2.OK() == 0 {
		t.Fatalf("a load made no request: %s / %s", h1, h2)
	}
	if h1.Failed() != 0 {
		t.Errorf("HTTP/1.1 requests failed: %s %q", h1, h1.Errors())
	}
	if h2.Failed() != 0 {
		t.Errorf("HTTP/2 requests failed: %s %q", h2, h2.Errors())
	}
	r, err := envoykit.Get(envoykit.URL(p.ports.Listener, "/"), 10*time.Second)
	if want := fmt.Sprintf("v%d", reloads); err != nil || r.Header.Get("x-config-version") != want {
		t.Errorf("after the reloads Envoy answered %+v, %v; want x-config-version %s", r, err, want)
	}
	sent := p.signal(syscall.SIGTERM)
	if code, _ := p.wait(sent, 30*time.Second); code != 0 {
		t.Fatalf("stop after the reloads exited %d", code)
	}
	for _, want := range []string{"draining envoy", "drain ended"} {
		if !p.logged(want) {
			t.Errorf("the stop's log lacks %q", want)
		}
	}
}

// What an idle kept-alive connection gets during a stop's drain, with
// Envoy 1.40: with the HTTP connection manager's defaults, nothing until
// Envoy exits at the drain's end (no GOAWAY for HTTP/2: README, Stop, said
// otherwise); with its idle_timeout, a GOAWAY (HTTP/2) or a close
// (HTTP/1.1) once the connection has been idle that long.
func TestStopDrainAndIdleConnections(t *testing.T) {
	tests := []struct {
		name        string
		idleTimeout string // the HCM's common_http_protocol_options.idle_timeout, "" for Envoy's default (1h)
		goaway      bool   // the idle HTTP/2 connection gets a GOAWAY before Envoy exits
	}{
		{"defaults", "", false},
		{"idle_timeout 1s, drain_timeout 0.5s", "1s", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			bootstrap := filepath.Join(t.TempDir(), "envoy.yaml")
			p := startAgentWith(t, procOptions{envoy: slowDrain, bootstrapFile: bootstrap,
				agent: map[string]string{"min_drain_duration": `"4s"`, "termination_drain_duration": `"4s"`}},
				func(ports envoykit.Ports) {
					y, err := envoykit.RenderBootstrap(envoykit.BootstrapOptions{Ports: ports})
					if err != nil {
						t.Fatal(err)
					}
					text := string(y)
					if tt.idleTimeout != "" {
						text = strings.Replace(text, "stat_prefix: ingress\n", "stat_prefix: ingress\n          common_http_protocol_options: { idle_timeout: "+tt.idleTimeout+" }\n          drain_timeout: 0.5s\n", 1)
					}
					writeFile(t, bootstrap, text)
				})
			addr := "127.0.0.1:" + strconv.Itoa(p.ports.Listener)
			h2, err := envoykit.DialIdleH2(addr, "/")
			if err != nil {
				t.Fatal(err)
			}
			defer h2.Close()
			if !envoykit.Eventually(5*time.Second, h2.Answered) {
				t.Fatalf("the HTTP/2 request got no answer")
			}
			h1, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer h1.Close()
			br := bufio.NewReader(h1)
			if _, err := io.WriteString(h1, "GET / HTTP/1.1\r\nHost: test\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("HTTP/1.1 request: %v %v", resp, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			h1closed := make(chan time.Time, 1)
			go func() { _, _ = br.ReadByte(); h1closed <- time.Now() }()

			sent := p.signal(syscall.SIGTERM)
			var h1at time.Time
			select {
			case h1at = <-h1closed:
			case <-time.After(20 * time.Second):
				t.Fatalf("the idle HTTP/1.1 connection was still open 20s after SIGTERM")
			}
			<-h2.Done()
			code, took := p.wait(sent, 20*time.Second)
			if code != 0 {
				t.Fatalf("exit %d", code)
			}
			exited := sent.Add(took)
			gaway := "none"
			if !h2.GoAway().IsZero() {
				gaway = h2.GoAway().Sub(sent).Round(time.Millisecond).String()
			}
			t.Logf("stop took %s; idle HTTP/2: GOAWAY %s, closed %s after SIGTERM; idle HTTP/1.1 closed %s after SIGTERM",
				took.Round(time.Millisecond), gaway, h2.Closed().Sub(sent).Round(time.Millisecond), h1at.Sub(sent).Round(time.Millisecond))
			// "Before the drain's end": more than a second before the agent exited.
			early := func(at time.Time) bool { return !at.IsZero() && at.Before(exited.Add(-time.Second)) }
			if got := early(h2.GoAway()); got != tt.goaway {
				t.Errorf("idle HTTP/2 got a GOAWAY before the drain's end: %v, want %v", got, tt.goaway)
			}
			if got := early(h1at); got != tt.goaway {
				t.Errorf("idle HTTP/1.1 closed before the drain's end: %v, want %v", got, tt.goaway)
			}
		})
	}
}

// TestBadReloadDuringADrainFailsAtOnce: a reload that has to wait for a
// draining epoch checks its files first: a bad configuration is refused at
// once, never after the drain.
//
// Issue 20, item 4: a bad bootstrap reloaded right after a good reload,
// while a client still holds a request on the replaced epoch, was refused
// only once that epoch had drained (33-40 s on Debian). It is refused while
// the request is still in flight, and so is a bad one that arrives while a
// good reload waits; the good reload then runs the files it validated.
func TestBadReloadDuringADrainFailsAtOnce(t *testing.T) {
	t.Parallel()
	p := startAgent(t, procOptions{envoy: slowDrain, bootstrap: envoykit.BootstrapOptions{ResponseHeader: "v0"}})
	bootstrap := filepath.Join(p.dir, "envoy.yaml")
	breakBootstrap := func() {
		good, err := os.ReadFile(bootstrap)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, bootstrap, strings.Replace(string(good), "type: STATIC", "type: NOT_A_TYPE", 1))
	}
	// The drain bound: epoch 0 holds this request for 12 s, longer than
	// every step below takes even on a loaded machine.
	req := p.slowRequest(false, 12*time.Second)
	inFlight := func() bool { return p.upstream.SlowInFlight() > 0 }

	p.rewriteBootstrap(envoykit.BootstrapOptions{ResponseHeader: "v1"})
	if code, out := p.reload(); code != 0 {
		t.Fatalf("good reload: exit %d: %s", code, out)
	}
	breakBootstrap()
	asked := time.Now()
	code, out := p.reload()
	took := time.Since(asked)
	if code != 3 || !strings.Contains(out, "Envoy rejects this bootstrap") || strings.Contains(out, "waiting for epoch") {
		t.Errorf("bad reload after a good one: exit %d: %s; want exit 3, Envoy's complaint, no wait", code, out)
	}
	if !inFlight() {
		t.Errorf("the bad reload answered after %s, once epoch 0's request had ended: it waited for the drain", took)
	}
	t.Logf("bad reload after a good one refused in %s, epoch 0's request still in flight", took.Round(time.Millisecond))

	// A good reload now has to wait for epoch 0, and says so at once.
	p.rewriteBootstrap(envoykit.BootstrapOptions{ResponseHeader: "v2"})
	type result struct {
		code int
		out  string
	}
	waiting := make(chan result, 1)
	go func() {
		code, out := p.reload()
		waiting <- result{code, out}
	}()
	if !envoykit.Eventually(10*time.Second, func() bool { return statusSaid(p, "reload waiting for epoch 0") }) {
		t.Fatalf("STATUS= never said the reload waits for epoch 0: %v", p.ns.Messages())
	}
	breakBootstrap()
	asked = time.Now()
	code, out = p.reload()
	took = time.Since(asked)
	if code != 3 || !strings.Contains(out, "Envoy rejects this bootstrap") {
		t.Errorf("bad reload while a good one waits: exit %d: %s; want exit 3", code, out)
	}
	select {
	case r := <-waiting:
		t.Fatalf("the waiting reload ended (exit %d: %s) before epoch 0's request did", r.code, r.out)
	default:
	}
	if !inFlight() {
		t.Errorf("the bad reload answered after %s, once epoch 0's request had ended", took)
	}
	t.Logf("bad reload while a good one waits refused in %s", took.Round(time.Millisecond))

	r := <-req
	r.check(t, "the 12s request on epoch 0")
	w := <-waiting
	if w.code != 0 || !strings.Contains(w.out, "reload: the configuration is valid; waiting for epoch 0 (pid") ||
		!strings.Contains(w.out, "reloaded: epoch 2 is serving") {
		t.Errorf("the waiting reload: exit %d: %s; want it to say at once that it waits, then epoch 2", w.code, w.out)
	}
	// It ran the files it validated (v2), not the broken file on disk.
	if rr, err := envoykit.Get(envoykit.URL(p.ports.Listener, "/"), 5*time.Second); err != nil || rr.Header.Get("x-config-version") != "v2" {
		t.Errorf("after the waiting reload: %+v %v; want v2", rr, err)
	}
}
