//go:build linux

package httpserver

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/envoy-agent/envoy-agent/service/connlimit"
)

// Limits bound what one HTTP server of the agent holds, so that clients
// that open connections and leave them idle cannot grow the agent (5,000
// idle keep-alive connections once took it from 13 to 180 MB).
type Limits struct {
	// MaxConns is the most connections open at once: a new one closes
	// the one that has waited longest for a request (service/connlimit), and
	// waits in the kernel's accept queue only while every one is being
	// answered.
	MaxConns int
	// Write bounds writing one answer; 0 for none (a reload's answer
	// comes when the reload ends, bounded by start_timeout instead).
	Write time.Duration
	// Evict closes the longest-waiting connection for a new one when
	// MaxConns are open (service/connlimit); without it the new one waits.
	Evict bool
	// Context gives each connection its context (the control socket's peer
	// credentials); nil for none.
	Context func(context.Context, net.Conn) context.Context
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

	// serverShutdownGrace is how long the agent's HTTP servers get to
	// finish answering when the agent exits.
	serverShutdownGrace = time.Second
)

// Serve serves h on a listener that is already bound, within lim, until
// ctx ends; it logs to log why it stopped early.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, lim Limits, log *logrus.Logger) {
	limited := connlimit.Listen(ln, lim.MaxConns, lim.Evict)
	srv := &http.Server{
		Handler:           limited.Handler(h),
		ReadHeaderTimeout: httpReadHeaderTimeout,
		ReadTimeout:       httpReadTimeout,
		WriteTimeout:      lim.Write,
		IdleTimeout:       httpIdleTimeout,
		ConnState:         limited.ConnState,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			ctx = connlimit.ConnContext(ctx, c)
			if lim.Context != nil {
				ctx = lim.Context(ctx, c)
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
