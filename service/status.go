package service

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/sirupsen/logrus"
)

// statusServer is the agent's own loopback HTTP API:
//   - GET /healthz/ready: 200 while Envoy is LIVE and not draining, else 503;
//   - POST /quitquitquit: stop Envoy at once, without a drain, and exit 0;
//   - POST /drain: drain with no end; a later stop exits at once;
//   - POST /reload: reload the configuration, answering with the outcome
//     (JSON) once it is done;
//   - GET, POST /upgrade: a live upgrade of the agent (upgrade.go).
//
// Peers that are not on loopback get 403; other methods on the POST routes
// get 405.
type statusServer struct {
	log    *logrus.Logger
	ready  func(context.Context) (bool, string)
	quit   func()
	drain  func()
	reload func(context.Context) ReloadResult
	// upgrade serves /upgrade (upgrade.go); nil leaves it out.
	upgrade http.Handler
}

func (s *statusServer) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz/ready", s.handleReady)
	mux.HandleFunc("/quitquitquit", post(func(w http.ResponseWriter, _ *http.Request) {
		s.log.Infof("/quitquitquit: stopping envoy without a drain")
		fmt.Fprintln(w, "OK")
		s.quit()
	}))
	mux.HandleFunc("/drain", post(func(w http.ResponseWriter, _ *http.Request) {
		s.log.Infof("/drain: draining envoy with no end; the next stop exits at once")
		s.drain()
		fmt.Fprintln(w, "OK")
	}))
	mux.HandleFunc("/reload", post(func(w http.ResponseWriter, r *http.Request) {
		res := s.reload(r.Context())
		w.Header().Set("Content-Type", "application/json")
		if !res.OK {
			w.WriteHeader(http.StatusConflict)
		}
		_ = json.NewEncoder(w).Encode(res)
	}))
	if s.upgrade != nil {
		mux.Handle("/upgrade", s.upgrade)
	}
	return loopbackOnly(mux)
}

func (s *statusServer) handleReady(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	ok, why := s.ready(ctx)
	if !ok {
		http.Error(w, why, http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, why)
}

// post answers 405 to anything but POST.
func post(f http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "method not allowed: use POST", http.StatusMethodNotAllowed)
			return
		}
		f(w, r)
	}
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

// serveHTTP serves h on a listener that is already bound, until ctx ends.
func serveHTTP(ctx context.Context, ln net.Listener, h http.Handler, log *logrus.Logger) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		log.Errorf("http server on %s: %v", ln.Addr(), err)
	}
}
