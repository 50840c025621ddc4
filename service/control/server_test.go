//go:build linux

package control

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sirupsen/logrus"
)

func TestControlPolicy(t *testing.T) {
	pol := controlPolicy{uid: 998, gid: 997} // the service user and group
	tests := []struct {
		name string
		peer peerCred
		want bool
	}{
		{"root", peerCred{UID: 0, GID: 0}, true},
		{"root with another gid", peerCred{UID: 0, GID: 5}, true},
		{"the service user", peerCred{UID: 998, GID: 997}, true},
		{"the service user, other gid", peerCred{UID: 998, GID: 100}, true},
		{"primary group is the service group", peerCred{UID: 1000, GID: 997}, true},
		{"supplementary group is the service group", peerCred{UID: 1000, GID: 1000, Groups: []uint32{27, 997}}, true},
		{"another user", peerCred{UID: 1000, GID: 1000, Groups: []uint32{27, 100}}, false},
		{"nobody", peerCred{UID: 65534, GID: 65534}, false},
		{"root's group is not root", peerCred{UID: 1000, GID: 0}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, why := pol.allows(tt.peer); got != tt.want {
				t.Fatalf("allows(%+v) = %v (%s), want %v", tt.peer, got, why, tt.want)
			}
		})
	}
}

// serveControl serves c on a fresh control socket and returns its path.
func serveControl(t *testing.T, c *Server) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "control.sock")
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: c.Handler(), ConnContext: WithPeerCred}
	done := make(chan struct{})
	go func() {
		_ = srv.Serve(ln)
		close(done)
	}()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return path
}

func unixClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}}}
}

// TestControlServer runs the control routes on a real unix socket, with the
// test's own credentials as the peer (the policy lets in its own user).
// Each subtest counts only the calls its own request made, so it passes
// alone (`-run 'TestControlServer/^quit$'`) as well as after the others.
func TestControlServer(t *testing.T) {
	var quits, drains, reloads atomic.Int64
	c := &Server{Log: testLogger(), Policy: OwnPolicy(), ConfigPath: "/etc/envoy-agent/config.toml",
		Quit: func() { quits.Add(1) }, Drain: func() { drains.Add(1) },
		Reload: func(context.Context, func(string), ReloadOptions) ReloadResult {
			reloads.Add(1)
			return ReloadResult{OK: true, Epoch: 1}
		}}
	path := serveControl(t, c)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != controlSocketMode || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("control socket mode %v, want a socket with %o", fi.Mode(), controlSocketMode)
	}
	client := unixClient(path)
	tests := []struct {
		name, method, path string
		header             map[string]string
		code               int
		quits, drains      int64 // calls this request made
		reloads            int64
	}{
		{"reload needs POST", "GET", "/reload", nil, 405, 0, 0, 0},
		{"quit needs POST", "GET", "/quitquitquit", nil, 405, 0, 0, 0},
		{"cross-origin reload refused", "POST", "/reload", map[string]string{"Origin": "http://evil.example"}, 403, 0, 0, 0},
		{"cross-site fetch refused", "POST", "/drain", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403, 0, 0, 0},
		{"reload", "POST", "/reload", nil, 200, 0, 0, 1},
		{"drain", "POST", "/drain", nil, 200, 0, 1, 0},
		{"quit", "POST", "/quitquitquit", nil, 200, 1, 0, 0},
		{"unknown route", "POST", "/nope", nil, 404, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			quits.Store(0)
			drains.Store(0)
			reloads.Store(0)
			req, _ := http.NewRequest(tt.method, "http://envoy-agent"+tt.path, nil)
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.code {
				t.Fatalf("%s %s = %s, want %d", tt.method, tt.path, resp.Status, tt.code)
			}
			if resp.Header.Get(controlPidHeader) != strconv.Itoa(os.Getpid()) || resp.Header.Get(controlConfigHeader) != c.ConfigPath {
				t.Errorf("identity headers %q %q, want pid %d and %s", resp.Header.Get(controlPidHeader), resp.Header.Get(controlConfigHeader), os.Getpid(), c.ConfigPath)
			}
			if q, d, r := quits.Load(), drains.Load(), reloads.Load(); q != tt.quits || d != tt.drains || r != tt.reloads {
				t.Fatalf("quits %d drains %d reloads %d, want %d %d %d", q, d, r, tt.quits, tt.drains, tt.reloads)
			}
		})
	}
}

// TestListenControlStale: a socket left by a dead agent is replaced; one a
// live process serves, or a file that is not a socket, is refused.
func TestListenControlStale(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close() // the file stays, nobody listens: an agent that was SIGKILLed
	again, err := Listen(stale)
	if err != nil {
		t.Fatalf("stale socket: %v", err)
	}
	if _, err := Listen(stale); err == nil || !strings.Contains(err.Error(), "another process serves it") {
		t.Fatalf("second listener on a live socket: %v, want refused", err)
	}
	again.Close()
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(plain); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("a regular file at the path: %v, want refused", err)
	}
	if data, _ := os.ReadFile(plain); string(data) != "x" {
		t.Fatalf("the regular file was touched")
	}
}

func testLogger() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}
