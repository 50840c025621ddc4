// Package testenvoy is what the tests share to run a real Envoy: finding the
// binary, free ports, bootstraps, a slow upstream and a NOTIFY_SOCKET
// listener. It is for tests only.
package testenvoy

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"
)

// Binary returns the real Envoy the tests run: $ENVOY_BIN, else an envoy on
// PATH, else the one `make envoy` caches. It fails the test when there is
// none: these tests are not to be skipped.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("ENVOY_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("ENVOY_BIN=%s: %v (run `make envoy`)", p, err)
		}
		return p
	}
	if p, err := exec.LookPath("envoy"); err == nil {
		return p
	}
	matches, _ := filepath.Glob(filepath.Join(RepoRoot(t), ".cache", "envoy", "*", "envoy"))
	if len(matches) > 0 {
		return matches[len(matches)-1]
	}
	t.Fatalf("no Envoy binary: set ENVOY_BIN, put envoy on PATH, or run `make envoy`")
	return ""
}

// RepoRoot is the module's root folder.
func RepoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot find the source folder")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago. It
// picks from below the kernel's ephemeral range (32768 and up here), so
// that the many client connections the tests open can never take it
// between this check and the test's bind.
func FreePort(t testing.TB) int {
	t.Helper()
	for range 1000 {
		port := 10000 + rand.IntN(22000)
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		ln.Close()
		return port
	}
	t.Fatalf("no free port below 32000 after 1000 tries")
	return 0
}

// BaseID returns a hot-restart base id unlikely to collide with another
// Envoy on the host.
func BaseID() uint32 { return 1000 + rand.Uint32N(60000) }

// Ports are the ports of one test Envoy and its agent.
type Ports struct {
	Admin, Listener, Upstream, Status, Prometheus int
}

// NewPorts picks free ports for everything but the upstream.
func NewPorts(t testing.TB) Ports {
	return Ports{Admin: FreePort(t), Listener: FreePort(t), Status: FreePort(t), Prometheus: FreePort(t)}
}

// BootstrapOptions shape a test bootstrap.
type BootstrapOptions struct {
	Ports
	// InitDelay keeps Envoy INITIALIZING for about this long: CDS from an
	// xDS server that is not there, with this initial fetch timeout.
	InitDelay time.Duration
	// AdminAddress overrides the admin bind address (default 127.0.0.1).
	AdminAddress string
	// ResponseHeader, when set, is added to every proxied response as
	// x-config-version.
	ResponseHeader string
}

var bootstrapTmpl = template.Must(template.New("bootstrap").Parse(`node: { id: envoy-agent-test, cluster: envoy-agent-test }
admin:
  address:
    socket_address: { address: {{.AdminAddress}}, port_value: {{.Admin}} }
{{- if .InitDelay}}
dynamic_resources:
  cds_config:
    resource_api_version: V3
    initial_fetch_timeout: {{.InitDelaySeconds}}s
    api_config_source:
      api_type: GRPC
      transport_api_version: V3
      grpc_services:
      - envoy_grpc: { cluster_name: xds }
{{- end}}
static_resources:
  listeners:
  - name: ingress
    address:
      socket_address: { address: 127.0.0.1, port_value: {{.Listener}} }
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              {{- if .ResponseHeader}}
              response_headers_to_add:
              - header: { key: x-config-version, value: "{{.ResponseHeader}}" }
              {{- end}}
              routes:
              - match: { prefix: "/" }
                route: { cluster: upstream, timeout: 0s }
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: upstream
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: upstream
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: { address: 127.0.0.1, port_value: {{.Upstream}} }
{{- if .InitDelay}}
  - name: xds
    type: STATIC
    connect_timeout: 0.25s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: { http2_protocol_options: {} }
    load_assignment:
      cluster_name: xds
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: { address: 127.0.0.1, port_value: 1 }
{{- end}}
`))

// WriteBootstrap writes a bootstrap to dir/name and returns its path.
func WriteBootstrap(t testing.TB, dir, name string, o BootstrapOptions) string {
	t.Helper()
	if o.AdminAddress == "" {
		o.AdminAddress = "127.0.0.1"
	}
	var b bytes.Buffer
	data := struct {
		BootstrapOptions
		InitDelaySeconds float64
	}{o, o.InitDelay.Seconds()}
	if err := bootstrapTmpl.Execute(&b, data); err != nil {
		t.Fatalf("bootstrap template: %v", err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatalf("write bootstrap: %v", err)
	}
	return p
}

// Upstream is an HTTP server behind the test Envoy: GET / answers at once;
// GET /slow?d=2s answers after d.
type Upstream struct {
	*httptest.Server
	Port int
}

// NewUpstream starts an Upstream, closed when the test ends.
func NewUpstream(t testing.TB) *Upstream {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		d, _ := time.ParseDuration(r.URL.Query().Get("d"))
		select {
		case <-time.After(d):
			fmt.Fprintln(w, "slow ok")
		case <-r.Context().Done():
		}
	})
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return &Upstream{Server: s, Port: s.Listener.Addr().(*net.TCPAddr).Port}
}

// NotifySocket is a real unix datagram socket standing in for systemd's.
type NotifySocket struct {
	Path string
	conn *net.UnixConn

	mu   sync.Mutex
	msgs []Message
	cond chan struct{} // closed and replaced on every message
}

// Message is one datagram received, with when it came.
type Message struct {
	At   time.Time
	Text string
}

// NewNotifySocket listens on a fresh socket path; closed when the test ends.
func NewNotifySocket(t testing.TB) *NotifySocket {
	t.Helper()
	dir, err := os.MkdirTemp("", "notify")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatalf("notify socket: %v", err)
	}
	ns := &NotifySocket{Path: path, conn: conn, cond: make(chan struct{})}
	go ns.read()
	t.Cleanup(func() { conn.Close(); os.RemoveAll(dir) })
	return ns
}

func (ns *NotifySocket) read() {
	buf := make([]byte, 64<<10)
	for {
		n, err := ns.conn.Read(buf)
		if err != nil {
			return
		}
		ns.mu.Lock()
		ns.msgs = append(ns.msgs, Message{At: time.Now(), Text: string(buf[:n])})
		close(ns.cond)
		ns.cond = make(chan struct{})
		ns.mu.Unlock()
	}
}

// Messages returns every datagram so far.
func (ns *NotifySocket) Messages() []Message {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return append([]Message(nil), ns.msgs...)
}

// WaitFor waits up to timeout for a datagram with a line that starts with
// kv ("READY=1", "EXTEND_TIMEOUT_USEC=", "STATUS=draining").
func (ns *NotifySocket) WaitFor(t testing.TB, kv string, timeout time.Duration) Message {
	t.Helper()
	deadline := time.After(timeout)
	for seen := 0; ; {
		ns.mu.Lock()
		msgs, cond := ns.msgs, ns.cond
		ns.mu.Unlock()
		for ; seen < len(msgs); seen++ {
			if HasAssignment(msgs[seen].Text, kv) {
				return msgs[seen]
			}
		}
		select {
		case <-cond:
		case <-deadline:
			t.Fatalf("no %q on the notify socket within %s; got %q", kv, timeout, texts(ns.Messages()))
			return Message{}
		}
	}
}

// HasAssignment reports whether a datagram has a line starting with kv.
func HasAssignment(text, kv string) bool {
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, kv) {
			return true
		}
	}
	return false
}

// Count counts datagrams with kv received in [from, to).
func (ns *NotifySocket) Count(kv string, from, to time.Time) int {
	n := 0
	for _, m := range ns.Messages() {
		if !m.At.Before(from) && m.At.Before(to) && HasAssignment(m.Text, kv) {
			n++
		}
	}
	return n
}

func texts(ms []Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Text
	}
	return out
}

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
