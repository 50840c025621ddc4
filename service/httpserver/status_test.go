//go:build linux

package httpserver

import (
	"context"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

func TestStatusServer(t *testing.T) {
	tests := []struct {
		name, method, path, peer string
		ready                    bool
		code                     int
	}{
		{"ready while live", "GET", "/healthz/ready", "127.0.0.1:5000", true, 200},
		{"not ready while draining", "GET", "/healthz/ready", "127.0.0.1:5000", false, 503},
		{"ready over ipv6 loopback", "GET", "/healthz/ready", "[::1]:5000", true, 200},
		{"remote peer forbidden", "GET", "/healthz/ready", "10.1.2.3:5000", true, 403},
		{"ready needs GET", "POST", "/healthz/ready", "127.0.0.1:5000", true, 405},
		// The control routes are on the control socket only.
		{"no quit here", "POST", "/quitquitquit", "127.0.0.1:5000", true, 404},
		{"no drain here", "POST", "/drain", "127.0.0.1:5000", true, 404},
		{"no reload here", "POST", "/reload", "127.0.0.1:5000", true, 404},
		{"unknown path", "GET", "/nope", "127.0.0.1:5000", true, 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Status{Ready: func(context.Context) (bool, string) {
				return tt.ready, map[bool]string{true: "LIVE", false: "draining"}[tt.ready]
			}}
			req := httptest.NewRequest(tt.method, tt.path, nil)
			req.RemoteAddr = tt.peer
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, req)
			if rec.Code != tt.code {
				t.Fatalf("%s %s from %s = %d, want %d (%s)", tt.method, tt.path, tt.peer, rec.Code, tt.code, rec.Body)
			}
		})
	}
}

// TestReadyCache: probes that arrive together cost Envoy one question, and
// a stale answer is asked again.
func TestReadyCache(t *testing.T) {
	var asked atomic.Int32
	release := make(chan struct{})
	ask := func(context.Context) (bool, string) {
		asked.Add(1)
		<-release
		return true, "LIVE"
	}
	c := readyCache{ttl: time.Hour} // no expiry while the test runs, however slow the machine
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if ok, why := c.get(ask); !ok || why != "LIVE" {
				t.Errorf("get = %v %q", ok, why)
			}
		})
	}
	close(release)
	wg.Wait()
	if n := asked.Load(); n != 1 {
		t.Fatalf("50 probes at once asked Envoy %d times, want 1", n)
	}
	c.mu.Lock()
	c.at = c.at.Add(-2 * c.ttl) // the answer is now stale
	c.mu.Unlock()
	c.get(ask)
	if n := asked.Load(); n != 2 {
		t.Fatalf("a stale answer was reused: asked %d times, want 2", n)
	}
}

// TestReadyCacheAnswersWhileAsking: once the answer is stale, a probe
// starts a new question and gets the last answer at once while it runs
// (Envoy's admin busy); a probe with no answer younger than readyStaleMax
// waits for the question.
func TestReadyCacheAnswersWhileAsking(t *testing.T) {
	release := make(chan struct{})
	var asked atomic.Int32
	ask := func(context.Context) (bool, string) {
		if asked.Add(1) > 1 {
			<-release
			return false, "DRAINING"
		}
		return true, "LIVE"
	}
	c := readyCache{ttl: time.Nanosecond}
	if ok, why := c.get(ask); !ok || why != "LIVE" {
		t.Fatalf("first get = %v %q", ok, why)
	}
	for range 10 {
		// Envoy's admin hangs on the second question: each probe still
		// gets the last answer, and only one question runs.
		if ok, why := c.get(ask); !ok || why != "LIVE" {
			t.Fatalf("get while asking = %v %q, want the last answer", ok, why)
		}
	}
	if !envoykit.Eventually(5*time.Second, func() bool { return asked.Load() == 2 }) || asked.Load() != 2 {
		t.Fatalf("asked %d times, want 2 (one question under way)", asked.Load())
	}
	c.mu.Lock()
	c.at = c.at.Add(-2 * readyStaleMax) // the last answer is too old to give
	c.mu.Unlock()
	got := make(chan string, 1)
	go func() { _, why := c.get(ask); got <- why }()
	select {
	case why := <-got:
		t.Fatalf("a probe with only an answer older than readyStaleMax got %q without waiting", why)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if why := <-got; why != "DRAINING" {
		t.Fatalf("after the question: %q, want its answer", why)
	}
}

// TestReadyCachePut: the start's LIVE, put in the cache, answers the first
// probe at once, however long Envoy's admin takes to answer the question
// the probe starts; an answer already asked is not overwritten.
func TestReadyCachePut(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	ask := func(context.Context) (bool, string) { <-release; return false, "PRE_INITIALIZING" }
	c := readyCache{}
	c.put(true, "LIVE")
	got := make(chan string, 1)
	go func() { _, why := c.get(ask); got <- why }()
	select {
	case why := <-got:
		if why != "LIVE" {
			t.Fatalf("the first probe after put: %q, want LIVE", why)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first probe after put waited for Envoy's admin")
	}
	c.put(false, "DRAINING")
	if _, why := c.get(ask); why != "LIVE" {
		t.Fatalf("put overwrote an answer: %q", why)
	}
}
