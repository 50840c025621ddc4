package main

// Reloads and stops with requests in flight on an epoch that a hot restart
// replaced, seen by clients that do not retry.

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/testenvoy"
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
	url := testenvoy.URL(p.ports.Listener, "/slow?d="+d.String())
	go func() {
		start := time.Now()
		client := &http.Client{Timeout: 40 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		if h2 {
			client = testenvoy.NewH2Client()
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
	if !testenvoy.Eventually(10*time.Second, func() bool { return p.upstream.SlowInFlight() > before }) {
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
	p := startAgent(t, procOptions{envoy: slowDrain, bootstrap: testenvoy.BootstrapOptions{ResponseHeader: "v0"},
		agent: map[string]string{"exit_on_zero_active_connections": "true", "min_drain_duration": `"1s"`, "termination_drain_duration": `"20s"`}})
	req := p.slowRequest(false, 5*time.Second)
	p.rewriteBootstrap(testenvoy.BootstrapOptions{ResponseHeader: "v1"})
	if code, out := p.reload(); code != 0 {
		t.Fatalf("reload: exit %d: %s", code, out)
	}
	sent := p.signal(syscall.SIGTERM)
	if !testenvoy.Eventually(5*time.Second, func() bool { return p.ns.Count("STATUS=draining: 1 active connections", sent, time.Now()) > 0 }) {
		t.Errorf("the drain never counted the old epoch's connection: %v", p.ns.Messages())
	}
	r := <-req
	r.check(t, "the request on the old epoch")
	code, _ := p.wait(sent, 30*time.Second)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(p.stderr.String(), "no active connections left") {
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
			p := startAgent(t, procOptions{envoy: slowDrain, bootstrap: testenvoy.BootstrapOptions{ResponseHeader: "v0"}})
			req := p.slowRequest(h2, 8*time.Second)
			p.rewriteBootstrap(testenvoy.BootstrapOptions{ResponseHeader: "v1"})
			if code, out := p.reload(); code != 0 {
				t.Fatalf("first reload: exit %d: %s", code, out)
			}
			// The scenario: the second reload comes 2s after the first.
			time.Sleep(2 * time.Second)
			p.rewriteBootstrap(testenvoy.BootstrapOptions{ResponseHeader: "v2"})
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
			if rr, err := testenvoy.Get(testenvoy.URL(p.ports.Listener, "/"), 5*time.Second); err != nil || rr.Header.Get("x-config-version") != "v2" {
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
	p := startAgent(t, procOptions{envoy: quickDrain, bootstrap: testenvoy.BootstrapOptions{ResponseHeader: "v0"}})
	addr := "127.0.0.1:" + strconv.Itoa(p.ports.Listener)
	busy := testenvoy.LoadSpec{Path: "/", Workers: 2}
	long := testenvoy.LoadSpec{Path: "/slow?d=1500ms", Workers: 2}
	idle := testenvoy.LoadSpec{Path: "/", Idle: 700 * time.Millisecond, Workers: 4}
	h1 := testenvoy.StartRawLoad(addr, busy, long)
	h1idle := testenvoy.StartRawLoad(addr, idle)
	h2 := testenvoy.StartH2Load(testenvoy.URL(p.ports.Listener, "/"), busy, long, idle)
	const reloads = 5
	for i := 1; i <= reloads; i++ {
		p.rewriteBootstrap(testenvoy.BootstrapOptions{ResponseHeader: fmt.Sprintf("v%d", i)})
		if code, out := p.reload(); code != 0 {
			t.Fatalf("reload %d: exit %d: %s", i, code, out)
		}
	}
	// Let the last replaced epoch exit (parent_shutdown_duration 2s) while
	// the load runs: that is when idle connections are closed.
	if !testenvoy.Eventually(20*time.Second, func() bool { return len(processesMentioning(p.dir+"/run/epoch-")) == 1 }) {
		t.Errorf("replaced epochs still running: %v", processesMentioning(p.dir))
	}
	o1, o1idle, o2 := h1.Stop(), h1idle.Stop(), h2.Stop()
	t.Logf("%d reloads; HTTP/1.1 busy and long: %s", reloads, o1)
	t.Logf("HTTP/1.1 idle keep-alive (700ms between requests): %s; errors %q", o1idle, o1idle.Errors)
	t.Logf("HTTP/2 busy, long and idle on shared connections: %s; errors %q", o2, o2.Errors)
	if o1.OK == 0 || o1idle.OK == 0 || o2.OK == 0 {
		t.Fatalf("a load made no request: %s / %s / %s", o1, o1idle, o2)
	}
	if o1.Failed != 0 {
		t.Errorf("busy or long HTTP/1.1 requests failed: %s %q", o1, o1.Errors)
	}
	if o2.Failed != 0 {
		t.Errorf("HTTP/2 requests failed: %s %q", o2, o2.Errors)
	}
	// Idle HTTP/1.1 connections: Envoy closes them only when the replaced
	// epoch exits, and a client that writes on one at that moment fails
	// (README, Reload). Such failures are allowed, but only those.
	if o1idle.FailedInFlight != 0 {
		t.Errorf("HTTP/1.1 idle-connection workers failed on fresh or busy connections: %s %q", o1idle, o1idle.Errors)
	}
}
