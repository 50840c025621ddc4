//go:build linux

package corpus

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The services behind Envoy, each on a port of the kernel's choosing on
// 127.0.0.1 and closed when the test ends. Each answer names the service,
// so that an answer says which route and which cluster it went through.

// serveHTTP runs handler on a new port and returns it.
func serveHTTP(t *testing.T, handler http.Handler) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// upstream is a service called name: it answers with its name, the
// request's path and what the filters in front of it added (the Lua
// filter's request header, the user ext_authz let through, and the
// caller add_user_agent names), and takes a
// WebSocket upgrade (101, then it closes).
func upstream(t *testing.T, name string) int {
	t.Helper()
	return serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("x-upstream", name)
		if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			if hj, ok := w.(http.Hijacker); ok {
				if c, buf, err := hj.Hijack(); err == nil {
					fmt.Fprintf(buf, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nx-upstream: %s\r\n\r\n", name)
					_ = buf.Flush()
					c.Close()
					return
				}
			}
		}
		w.Header().Set("content-type", "text/plain")
		fmt.Fprintf(w, "%s %s %s lua=%q user=%q", name, r.Method, r.URL.Path, r.Header.Get("x-lua-request"), r.Header.Get("x-current-user"))
		if c, ok := r.Header["X-Envoy-Downstream-Service-Cluster"]; ok {
			fmt.Fprintf(w, " caller=%q node=%q", c, r.Header.Values("x-envoy-downstream-service-node"))
		}
		fmt.Fprintln(w)
	}))
}

// authzToken is the one bearer token the authorization service allows.
const authzToken = "Bearer token1"

// authz is an HTTP ext_authz service: it allows a request that carries
// authzToken, telling the upstream who the user is, and denies the rest.
func authz(t *testing.T) int {
	t.Helper()
	return serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != authzToken {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		w.Header().Set("x-current-user", "user1")
	}))
}

// udpEcho is a UDP service called name: it answers each datagram with its
// name and the datagram.
func udpEcho(t *testing.T, name string) int {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(fmt.Appendf(nil, "%s got %q", name, buf[:n]), from)
		}
	}()
	return pc.LocalAddr().(*net.UDPAddr).Port
}
