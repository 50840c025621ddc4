package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"
)

// maxSlow bounds how long /slow may be asked to wait.
const maxSlow = 10 * time.Second

// upstream is the HTTP server behind every Envoy: GET / answers at once,
// GET /slow?d=2s answers after d (at most maxSlow).
type upstream struct {
	srv  *http.Server
	port int
}

func startUpstream() (*upstream, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("upstream: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		d, _ := time.ParseDuration(r.URL.Query().Get("d"))
		t := time.NewTimer(min(d, maxSlow))
		defer t.Stop()
		select {
		case <-t.C:
			fmt.Fprintln(w, "slow ok")
		case <-r.Context().Done():
		}
	})
	u := &upstream{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, port: ln.Addr().(*net.TCPAddr).Port}
	go func() { _ = u.srv.Serve(ln) }()
	return u, nil
}

func (u *upstream) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = u.srv.Shutdown(ctx)
}
