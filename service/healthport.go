//go:build linux

package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/envoy-agent/envoy-agent/service/connlimit"
	"github.com/sirupsen/logrus"
)

// statusServer is the agent's loopback HTTP port, for local probes and load
// balancers: GET /healthz/ready answers 200 while Envoy is LIVE and not
// draining, else 503. Peers that are not on loopback get 403. Everything
// that changes the service (quit, drain, reload) is on the control socket
// (control.Server), which only the service's operators can use.
type statusServer struct {
	log   *logrus.Logger
	ready func(context.Context) (bool, string)
	// draining, when set, is asked on every probe, before the cached
	// answer: a drain shows at once.
	draining func() bool
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

func (s *statusServer) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz/ready", s.handleReady)
	for _, p := range []string{"/quitquitquit", "/drain", "/reload"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "not here: the control routes are on the agent's control socket (agent.control_socket); use envoy-agent reload, or curl --unix-socket as root or the service group", http.StatusNotFound)
		})
	}
	return loopbackOnly(mux)
}

func (s *statusServer) handleReady(w http.ResponseWriter, _ *http.Request) {
	if s.draining != nil && s.draining() {
		http.Error(w, "draining", http.StatusServiceUnavailable)
		return
	}
	ok, why := s.cache.get(s.ready)
	if !ok {
		http.Error(w, why, http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, why)
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

// serverLimits bound what one HTTP server of the agent holds, so that
// clients that open connections and leave them idle cannot grow the agent
// (5,000 idle keep-alive connections once took it from 13 to 180 MB).
type serverLimits struct {
	// maxConns is the most connections open at once: a new one closes
	// the one that has waited longest for a request (service/connlimit), and
	// waits in the kernel's accept queue only while every one is being
	// answered.
	maxConns int
	// write bounds writing one answer; 0 for none (a reload's answer
	// comes when the reload ends, bounded by start_timeout instead).
	write time.Duration
	// evict closes the longest-waiting connection for a new one when
	// maxConns are open (service/connlimit); without it the new one waits.
	evict bool
	// context gives each connection its context (the control socket's peer
	// credentials); nil for none.
	context func(context.Context, net.Conn) context.Context
}

const (
	// httpReadHeaderTimeout and httpReadTimeout: the agent's requests are
	// a line and a few headers, with no body worth waiting for.
	httpReadHeaderTimeout = 5 * time.Second
	httpReadTimeout       = 10 * time.Second
	// httpIdleTimeout closes a keep-alive connection with no request for
	// this long: probes and scrapes come every few seconds, so they still
	// reuse theirs.
	httpIdleTimeout = 30 * time.Second
	// statusMaxConns: load balancers and local probes hold a few each.
	statusMaxConns = 64
	// statusWriteTimeout: /healthz/ready answers within readyQueryTimeout.
	statusWriteTimeout = 10 * time.Second
	// metricsMaxConns: Prometheus scrapes with one connection per target.
	metricsMaxConns = 16
	// metricsWriteTimeout is above the 10 s the merged metrics give Envoy.
	metricsWriteTimeout = 30 * time.Second
	// controlMaxConns: operators' commands, one at a time as a rule.
	controlMaxConns = 16
)

// serveHTTP serves h on a listener that is already bound, within lim, until
// ctx ends.
func serveHTTP(ctx context.Context, ln net.Listener, h http.Handler, lim serverLimits, log *logrus.Logger) {
	limited := connlimit.Listen(ln, lim.maxConns, lim.evict)
	srv := &http.Server{
		Handler:           limited.Handler(h),
		ReadHeaderTimeout: httpReadHeaderTimeout,
		ReadTimeout:       httpReadTimeout,
		WriteTimeout:      lim.write,
		IdleTimeout:       httpIdleTimeout,
		ConnState:         limited.ConnState,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			ctx = connlimit.ConnContext(ctx, c)
			if lim.context != nil {
				ctx = lim.context(ctx, c)
			}
			return ctx
		},
	}
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), serverShutdownGrace)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	// net.ErrClosed: the control socket is closed at exit before the
	// shutdown, to remove its file.
	if err := srv.Serve(limited); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
		log.Errorf("http server on %s: %v", ln.Addr(), err)
	}
}
