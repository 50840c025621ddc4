//go:build linux

package main

// A reload that has to wait for a draining epoch checks its files first:
// a bad configuration is refused at once, never after the drain.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

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
