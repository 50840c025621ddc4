package envoykit

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// MaxSlow bounds how long GET /slow may be asked to wait, so that no request
// of a test or benchmark can hang it.
const MaxSlow = 30 * time.Second

// Upstream is the HTTP server behind Envoy: GET / answers at once (every
// n-th with 503 after FailEvery(n)), GET /slow?d=2s answers after d (at
// most MaxSlow).
type Upstream struct {
	Port      int
	srv       *http.Server
	slowIn    atomic.Int64
	failEvery atomic.Int64
	served    atomic.Int64 // GET / answered
}

// FailEvery makes GET / answer every n-th request with 503 (a background
// of failures an application has); 0 answers every one 200.
func (u *Upstream) FailEvery(n int) { u.failEvery.Store(int64(n)) }

// StartUpstream starts an Upstream on a port of the kernel's choosing on
// 127.0.0.1 (Envoy, not the clients, connects to it).
func StartUpstream() (*Upstream, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("upstream: %w", err)
	}
	u := &Upstream{Port: ln.Addr().(*net.TCPAddr).Port}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if n := u.failEvery.Load(); u.served.Add(1)%max(n, 1) == 0 && n > 0 {
			http.Error(w, "the application's own failure", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		u.slowIn.Add(1)
		defer u.slowIn.Add(-1)
		d, _ := time.ParseDuration(r.URL.Query().Get("d"))
		t := time.NewTimer(min(d, MaxSlow))
		defer t.Stop()
		select {
		case <-t.C:
			fmt.Fprintln(w, "slow ok")
		case <-r.Context().Done():
		}
	})
	u.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = u.srv.Serve(ln) }()
	return u, nil
}

// SlowInFlight is how many GET /slow requests the upstream is holding now.
func (u *Upstream) SlowInFlight() int { return int(u.slowIn.Load()) }

// Close stops the upstream, cutting requests still in flight after a second.
func (u *Upstream) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if u.srv.Shutdown(ctx) != nil {
		_ = u.srv.Close()
	}
}

// NewUpstream starts an Upstream (StartUpstream), closed when the test
// ends; it fails the test on an error.
func NewUpstream(t testing.TB) *Upstream {
	t.Helper()
	u, err := StartUpstream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(u.Close)
	return u
}
