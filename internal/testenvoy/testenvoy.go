// Package testenvoy is internal/envoykit for tests: the same kit (the real
// Envoy binary, ports below the ephemeral range, bootstraps, an upstream, a
// NOTIFY_SOCKET), failing the test on an error and closing what it started
// when the test ends, with the tests' one Eventually. The load is the kit's
// (envoykit.Load). It is for tests only.
package testenvoy

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// Binary returns the real Envoy the tests run (envoykit.FindEnvoy). It fails
// the test when there is none: these tests are not to be skipped, except by
// make test-unit, the fast tier (envoykit.UnitTier), which leaves them to
// make test.
func Binary(t testing.TB) string {
	t.Helper()
	if envoykit.UnitTier() {
		t.Skip("runs the real Envoy: make test (this is make test-unit)")
	}
	p, err := envoykit.FindEnvoy("")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// RepoRoot is the module's root folder.
func RepoRoot(t testing.TB) string {
	t.Helper()
	root, err := envoykit.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// FreePort returns a TCP port on 127.0.0.1 below the ephemeral range that
// was free a moment ago (envoykit.FreePort).
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := envoykit.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// BaseID returns a hot-restart base id unlikely to collide with another
// Envoy on the host.
func BaseID() uint32 { return envoykit.BaseID() }

// Ports are the ports of one test Envoy and its agent.
type Ports = envoykit.Ports

// NewPorts picks free ports for everything but the upstream.
func NewPorts(t testing.TB) Ports {
	t.Helper()
	p, err := envoykit.NewPorts()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// BootstrapOptions shape a test bootstrap.
type BootstrapOptions = envoykit.BootstrapOptions

// WriteBootstrap writes a bootstrap to dir/name and returns its path.
func WriteBootstrap(t testing.TB, dir, name string, o BootstrapOptions) string {
	t.Helper()
	p, err := envoykit.WriteBootstrap(dir, name, o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Upstream is the HTTP server behind the test Envoy: GET / answers at once;
// GET /slow?d=2s answers after d.
type Upstream = envoykit.Upstream

// NewUpstream starts an Upstream, closed when the test ends.
func NewUpstream(t testing.TB) *Upstream {
	t.Helper()
	u, err := envoykit.StartUpstream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(u.Close)
	return u
}

// NotifySocket is a real unix datagram socket standing in for systemd's.
type NotifySocket struct {
	*envoykit.NotifySocket
}

// Message is one datagram received, with when it came.
type Message = envoykit.Message

// NewNotifySocket listens on a fresh socket path; closed when the test ends.
func NewNotifySocket(t testing.TB) *NotifySocket {
	t.Helper()
	ns, err := envoykit.ListenNotify()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Close)
	return &NotifySocket{ns}
}

// WaitFor waits up to timeout for a datagram with a line that starts with
// kv ("READY=1", "EXTEND_TIMEOUT_USEC=", "STATUS=draining").
func (ns *NotifySocket) WaitFor(t testing.TB, kv string, timeout time.Duration) Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	m, err := ns.NotifySocket.WaitFor(ctx, kv, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// HasAssignment reports whether a datagram has a line starting with kv.
func HasAssignment(text, kv string) bool { return envoykit.HasAssignment(text, kv) }

// Response is what Get saw.
type Response struct {
	Code   int
	Body   string
	Header http.Header
	Close  bool // the server asked to close the connection
}

// Get is an HTTP GET on a fresh connection, with a timeout.
func Get(url string, timeout time.Duration) (Response, error) {
	c := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(resp.Body)
	return Response{Code: resp.StatusCode, Body: b.String(), Header: resp.Header, Close: resp.Close}, err
}

// URL is http://127.0.0.1:port followed by path.
func URL(port int, path string) string { return "http://127.0.0.1:" + strconv.Itoa(port) + path }

// Alive reports whether a process with this pid exists (and is no zombie).
func Alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(b)
	i := strings.LastIndex(s, ")")
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// Eventually polls cond every 10ms until it is true or timeout passes.
func Eventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// WaitAnswers waits until the load has had n more good answers than now.
func WaitAnswers(t testing.TB, l *envoykit.Load, n int64) {
	t.Helper()
	from := l.OK()
	if !Eventually(10*time.Second, func() bool { return l.OK() >= from+n }) {
		t.Fatalf("the load got fewer than %d answers in 10s (%s, last error: %s)", n, l, l.LastErr())
	}
}

// SyncBuffer is a bytes.Buffer safe for a writer and a reader: a process's
// output read while it runs.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
