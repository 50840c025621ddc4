//go:build linux

package httpserver

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// Status is the agent's loopback HTTP port, for local probes and load
// balancers: GET /healthz/ready answers 200 while Envoy is LIVE and not
// draining, else 503. Peers that are not on loopback get 403. Everything
// that changes the service (quit, drain, reload) is on the control socket
// (control.Server), which only the service's operators can use.
type Status struct {
	// Log gets why the server stopped early (Serve).
	Log *logrus.Logger
	// Ready is asked whether Envoy is ready, and the answer's text: the
	// supervisor's question to Envoy's admin. Its answer is reused for
	// readyCacheTTL (readyCache).
	Ready func(context.Context) (bool, string)
	// Draining, when set, is asked on every probe, before the cached
	// answer: a drain shows at once.
	Draining func() bool
	cache    readyCache
}

// readyCacheTTL is how long one answer of /healthz/ready is reused: probes
// arriving together then cost Envoy's admin one request, not one each (a
// flood of probes opened thousands of admin connections), and a change of
// state shows within a tenth of a second.
const readyCacheTTL = 100 * time.Millisecond

// readyQueryTimeout bounds one question to Envoy's admin for
// /healthz/ready; a wedged Envoy is then "not ready" within it.
const readyQueryTimeout = 2 * time.Second

// Serve serves s on ln, a listener already bound, within the status
// port's limits, until ctx ends.
func (s *Status) Serve(ctx context.Context, ln net.Listener) {
	Serve(ctx, ln, s.Handler(), Limits{MaxConns: statusMaxConns, Write: statusWriteTimeout, Evict: true}, s.Log)
}

// Handler answers GET /healthz/ready to loopback peers, 404 with where to
// go instead on the control routes, and 403 to everyone else.
func (s *Status) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz/ready", s.handleReady)
	for _, p := range []string{"/quitquitquit", "/drain", "/reload"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "not here: the control routes are on the agent's control socket (agent.control_socket); use envoy-agent reload, or curl --unix-socket as root or the service group", http.StatusNotFound)
		})
	}
	return loopbackOnly(mux)
}

func (s *Status) handleReady(w http.ResponseWriter, _ *http.Request) {
	if s.Draining != nil && s.Draining() {
		http.Error(w, "draining", http.StatusServiceUnavailable)
		return
	}
	ok, why := s.cache.get(s.Ready)
	if !ok {
		http.Error(w, why, http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, why)
}

// Seed gives /healthz/ready an answer learnt elsewhere (the start's own wait
// for LIVE) unless it has one already: the first probe is then answered at
// once (readyCache.put).
func (s *Status) Seed(ok bool, why string) {
	s.cache.put(ok, why)
}

// readyCache holds the last answer of /healthz/ready for readyCacheTTL. One
// question to Envoy runs at a time; callers that arrive meanwhile share its
// answer. Once an answer is older than the TTL, the next caller starts a
// new question and, while the last answer is younger than readyStaleMax,
// is answered with it at once: a probe never waits on Envoy's admin then,
// however busy its main thread is (rendering metrics for scrapers, say).
// Only a caller with no answer, or one older than readyStaleMax, waits for
// the question. The question has a context of its own, so a caller that
// hangs up cannot make a failed answer everyone then shares.
type readyCache struct {
	ttl time.Duration // 0 is readyCacheTTL

	mu     sync.Mutex
	at     time.Time
	ok     bool
	why    string
	flight chan struct{} // closed when the question under way ends; nil when none
}

// readyStaleMax is the oldest answer a probe is given while a newer one is
// asked: a wedged Envoy is "not ready" within it and readyQueryTimeout.
const readyStaleMax = readyQueryTimeout

func (c *readyCache) get(ask func(context.Context) (bool, string)) (bool, string) {
	c.mu.Lock()
	ttl := c.ttl
	if ttl == 0 {
		ttl = readyCacheTTL
	}
	age := time.Since(c.at)
	if !c.at.IsZero() && age < ttl {
		defer c.mu.Unlock()
		return c.ok, c.why
	}
	flight := c.flight
	if flight == nil {
		flight = make(chan struct{})
		c.flight = flight
		go c.refresh(ask, flight)
	}
	if !c.at.IsZero() && age < readyStaleMax {
		defer c.mu.Unlock()
		return c.ok, c.why
	}
	c.mu.Unlock()
	<-flight
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ok, c.why
}

// put records an answer learnt elsewhere: the start's own wait for LIVE.
// A probe right after it is then answered at once, not by a first
// question to an Envoy whose main thread may be busy (scrapers of a large
// Envoy, both cores busy: the first probes after LIVE waited 2 s and
// answered 503).
func (c *readyCache) put(ok bool, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() {
		c.ok, c.why, c.at = ok, why, time.Now()
	}
}

func (c *readyCache) refresh(ask func(context.Context) (bool, string), flight chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), readyQueryTimeout)
	defer cancel()
	ok, why := ask(ctx)
	c.mu.Lock()
	c.ok, c.why, c.at, c.flight = ok, why, time.Now(), nil
	c.mu.Unlock()
	close(flight)
}

// loopbackOnly answers 403 to any peer that is not on a loopback address.
func loopbackOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isLoopbackPeer(r.RemoteAddr) {
			http.Error(w, "forbidden: only loopback peers may use this API", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func isLoopbackPeer(remote string) bool {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return false
	}
	return ap.Addr().Unmap().IsLoopback()
}
