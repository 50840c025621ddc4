//go:build linux

package certs_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy/certs"
	"github.com/envoy-agent/envoy-agent/envoy/inplace"
	"github.com/envoy-agent/envoy-agent/envoy/xds"
	"github.com/envoy-agent/envoy-agent/envoy/xds/ads"
	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

var farFuture = time.Now().Add(90 * 24 * time.Hour)

// served is a bare Envoy running a bootstrap that a Manager rewrote, and
// the Manager watching its files.
type served struct {
	m    *certs.Manager
	log  *logs
	p    *envoykit.Process
	addr string
}

func serve(t *testing.T, certFile, keyFile string) *served {
	t.Helper()
	return serveWith(t, certFile, keyFile, time.Hour) // inotify alone: the poll would hide a missed event
}

// serveWith is serve with the Manager's Poll, and options applied to it.
func serveWith(t *testing.T, certFile, keyFile string, poll time.Duration, opts ...func(*certs.Manager)) *served {
	t.Helper()
	bin := envoykit.Binary(t)
	port, admin := envoykit.FreePort(t), envoykit.FreePort(t)
	l := &logs{t: t}
	m, srv, run := newManager(t, l)
	m.Poll = poll
	for _, o := range opts {
		o(m)
	}
	data, err := m.RewriteBootstrap(envoykit.TLSBootstrap(certFile, keyFile, port, admin), "envoy.yaml", run)
	if err != nil {
		t.Fatal(err)
	}
	copyPath := writeRunnable(t, srv, run, runningCopy(t, data, admin))
	out, err := os.Create(filepath.Join(t.TempDir(), "envoy.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close() })
	p, err := envoykit.Start(bin, []string{"-c", copyPath, "--disable-hot-restart", "--concurrency", "1", "-l", "warning"}, out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	if err := p.WaitReady(admin, 10*time.Second); err != nil {
		b, _ := os.ReadFile(out.Name())
		t.Fatalf("%v\n%s", err, b)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = m.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	<-certs.Watching(m)
	return &served{m: m, log: l, p: p, addr: "127.0.0.1:" + strconv.Itoa(port)}
}

// handshake opens a new TLS connection and returns the serial of the
// certificate Envoy presented.
func (s *served) handshake() (string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", s.addr, &tls.Config{InsecureSkipVerify: true, ServerName: "localhost"})
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Text(16), nil
}

// waitSerial waits up to 2 s (the bound) for new handshakes to
// see serial, and returns how long that took from since.
func (s *served) waitSerial(t *testing.T, serial string, since time.Time) time.Duration {
	t.Helper()
	var last string
	var took time.Duration
	if !envoykit.Eventually(2*time.Second, func() bool {
		got, err := s.handshake()
		last = fmt.Sprint(got, err)
		took = time.Since(since)
		return err == nil && got == serial
	}) {
		t.Fatalf("new handshakes still see %s, want serial %s, 2 s after the files changed", last, serial)
	}
	return took
}

// openConn is a TLS connection kept open across a renewal.
type openConn struct {
	c  *tls.Conn
	br *bufio.Reader
}

func (s *served) open(t *testing.T) *openConn {
	t.Helper()
	c, err := tls.Dial("tcp", s.addr, &tls.Config{InsecureSkipVerify: true, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	o := &openConn{c: c, br: bufio.NewReader(c)}
	o.get(t)
	return o
}

// get sends a request on the open connection and checks the answer.
func (o *openConn) get(t *testing.T) {
	t.Helper()
	_ = o.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := o.c.Write([]byte("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")); err != nil {
		t.Fatalf("open connection: %v", err)
	}
	resp, err := http.ReadResponse(o.br, nil)
	if err != nil {
		t.Fatalf("open connection: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("open connection: status %d", resp.StatusCode)
	}
}

func (o *openConn) serial() string {
	return o.c.ConnectionState().PeerCertificates[0].SerialNumber.Text(16)
}

// writeStyle is one way renewal tools put a new pair in place. setup lays
// out the first pair and returns the files the bootstrap names; renew puts
// the next pair in place.
type writeStyle struct {
	name  string
	setup func(t *testing.T, dir string, p pair) (certFile, keyFile string)
	renew func(t *testing.T, dir string, p pair, n int)
}

func renameInto(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	writeFile(t, tmp, data)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	_ = os.Remove(link)
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// certbotRenew is certbot's renewal: new files in archive/, then each link
// of live/ re-pointed by unlink and symlink, one at a time (certbot 2.1.0,
// docs/… acme-on-this-machine.md).
func certbotRenew(t *testing.T, dir string, p pair, n int, between func()) {
	t.Helper()
	arch := filepath.Join(dir, "archive", "site")
	writeFile(t, filepath.Join(arch, fmt.Sprintf("cert%d.pem", n)), p.cert)
	writeFile(t, filepath.Join(arch, fmt.Sprintf("privkey%d.pem", n)), p.key)
	symlink(t, fmt.Sprintf("../../archive/site/cert%d.pem", n), filepath.Join(dir, "live", "site", "cert.pem"))
	between()
	symlink(t, fmt.Sprintf("../../archive/site/privkey%d.pem", n), filepath.Join(dir, "live", "site", "privkey.pem"))
}

func certbotSetup(t *testing.T, dir string, p pair) (string, string) {
	t.Helper()
	for _, d := range []string{"archive/site", "live/site"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	certbotRenew(t, dir, p, 1, func() {})
	return filepath.Join(dir, "live", "site", "cert.pem"), filepath.Join(dir, "live", "site", "privkey.pem")
}

var writeStyles = []writeStyle{
	{
		name: "rename into place",
		setup: func(t *testing.T, dir string, p pair) (string, string) {
			writeFile(t, filepath.Join(dir, "c.pem"), p.cert)
			writeFile(t, filepath.Join(dir, "k.pem"), p.key)
			return filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
		},
		renew: func(t *testing.T, dir string, p pair, n int) {
			renameInto(t, filepath.Join(dir, "k.pem"), p.key)
			renameInto(t, filepath.Join(dir, "c.pem"), p.cert)
		},
	},
	{
		name: "rewrite in place with cp",
		setup: func(t *testing.T, dir string, p pair) (string, string) {
			writeFile(t, filepath.Join(dir, "c.pem"), p.cert)
			writeFile(t, filepath.Join(dir, "k.pem"), p.key)
			return filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
		},
		renew: func(t *testing.T, dir string, p pair, n int) {
			src := t.TempDir()
			writeFile(t, filepath.Join(src, "c.pem"), p.cert)
			writeFile(t, filepath.Join(src, "k.pem"), p.key)
			for _, f := range []string{"c.pem", "k.pem"} {
				if out, err := exec.Command("cp", filepath.Join(src, f), filepath.Join(dir, f)).CombinedOutput(); err != nil {
					t.Fatalf("cp: %v: %s", err, out)
				}
			}
		},
	},
	{
		name:  "certbot live links re-pointed into archive",
		setup: certbotSetup,
		renew: func(t *testing.T, dir string, p pair, n int) { certbotRenew(t, dir, p, n, func() {}) },
	},
	{
		name: "swapped folder link",
		setup: func(t *testing.T, dir string, p pair) (string, string) {
			v := filepath.Join(dir, "v1")
			if err := os.Mkdir(v, 0o700); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(v, "c.pem"), p.cert)
			writeFile(t, filepath.Join(v, "k.pem"), p.key)
			symlink(t, "v1", filepath.Join(dir, "current"))
			return filepath.Join(dir, "current", "c.pem"), filepath.Join(dir, "current", "k.pem")
		},
		renew: func(t *testing.T, dir string, p pair, n int) {
			v := fmt.Sprintf("v%d", n)
			if err := os.Mkdir(filepath.Join(dir, v), 0o700); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(dir, v, "c.pem"), p.cert)
			writeFile(t, filepath.Join(dir, v, "k.pem"), p.key)
			symlink(t, v, filepath.Join(dir, "current.new"))
			if err := os.Rename(filepath.Join(dir, "current.new"), filepath.Join(dir, "current")); err != nil {
				t.Fatal(err)
			}
		},
	},
}

// Each way of writing a renewal reaches new handshakes within 2 s, with
// no reload and the same Envoy process, while a connection opened before
// goes on with the old certificate; twice in a row.
func TestRenewalByEveryWriteStyle(t *testing.T) {
	var took []time.Duration
	for _, ws := range writeStyles {
		t.Run(ws.name, func(t *testing.T) {
			dir := t.TempDir()
			first := newPair(t, farFuture)
			certFile, keyFile := ws.setup(t, dir, first)
			s := serve(t, certFile, keyFile)
			pid := s.p.Pid()
			if got, err := s.handshake(); err != nil || got != first.serial {
				t.Fatalf("first handshake: %s, %v; want serial %s", got, err, first.serial)
			}
			prev := first
			for n := 2; n <= 3; n++ {
				old := s.open(t)
				next := newPair(t, farFuture)
				start := time.Now()
				ws.renew(t, dir, next, n)
				d := s.waitSerial(t, next.serial, start)
				took = append(took, d)
				t.Logf("renewal %d: new handshakes see serial %s after %s", n, next.serial, d.Round(time.Millisecond))
				old.get(t)
				if old.serial() != prev.serial {
					t.Fatalf("the open connection's certificate changed")
				}
				if !s.p.Running() || s.p.Pid() != pid {
					t.Fatal("Envoy did not keep running as the same process")
				}
				certs := s.m.Certificates()
				if len(certs) != 1 || certs[0].Serial != next.serial || certs[0].File != certFile || certs[0].Error != "" {
					t.Fatalf("Certificates() = %+v", certs)
				}
				prev = next
			}
			if n := s.log.count("BEGIN"); n != 0 {
				t.Fatalf("%d log lines hold PEM", n)
			}
			if n := s.log.count("error"); n != 0 {
				t.Fatalf("%d errors logged for whole renewals", n)
			}
		})
	}
	if len(took) > 0 {
		sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
		t.Logf("renewal to first new handshake over %d renewals: median %s, max %s", len(took), took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
	}
}

// A half-done renewal never reaches Envoy: it is logged once, naming the
// file; the pair in use keeps serving; the new pair is taken once whole.
func TestHalfDoneRenewalKeepsThePairInUse(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string, p pair) (string, string)
		// half puts a half-done renewal of p in place and returns the file
		// its error names; whole completes it.
		half, whole func(t *testing.T, dir string, p pair)
		names       string
	}{
		{
			name:  "certbot: new certificate beside the old key",
			setup: certbotSetup,
			half: func(t *testing.T, dir string, p pair) {
				arch := filepath.Join(dir, "archive", "site")
				writeFile(t, filepath.Join(arch, "cert2.pem"), p.cert)
				writeFile(t, filepath.Join(arch, "privkey2.pem"), p.key)
				symlink(t, "../../archive/site/cert2.pem", filepath.Join(dir, "live", "site", "cert.pem"))
			},
			whole: func(t *testing.T, dir string, p pair) {
				symlink(t, "../../archive/site/privkey2.pem", filepath.Join(dir, "live", "site", "privkey.pem"))
			},
			names: "live/site/privkey.pem",
		},
		{
			name:  "empty certificate file",
			setup: writeStyles[0].setup,
			half:  func(t *testing.T, dir string, p pair) { renameInto(t, filepath.Join(dir, "c.pem"), nil) },
			whole: func(t *testing.T, dir string, p pair) {
				renameInto(t, filepath.Join(dir, "k.pem"), p.key)
				renameInto(t, filepath.Join(dir, "c.pem"), p.cert)
			},
			names: "c.pem: is empty",
		},
		{
			name:  "unparsable key",
			setup: writeStyles[0].setup,
			half: func(t *testing.T, dir string, p pair) {
				renameInto(t, filepath.Join(dir, "k.pem"), []byte("-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n"))
				renameInto(t, filepath.Join(dir, "c.pem"), p.cert)
			},
			whole: func(t *testing.T, dir string, p pair) { renameInto(t, filepath.Join(dir, "k.pem"), p.key) },
			names: "k.pem: does not go with",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			first := newPair(t, farFuture)
			certFile, keyFile := c.setup(t, dir, first)
			s := serve(t, certFile, keyFile)
			old := s.open(t)
			next := newPair(t, farFuture)
			c.half(t, dir, next)
			if !envoykit.Eventually(2*time.Second, func() bool { return s.log.count("error", c.names) > 0 }) {
				t.Fatalf("no error naming %q logged", c.names)
			}
			// More events in the folders, and a full check: still one line.
			writeFile(t, filepath.Join(dir, "unrelated"), []byte("x"))
			s.m.Check()
			if got, err := s.handshake(); err != nil || got != first.serial {
				t.Fatalf("during the half-done renewal new handshakes see %s, %v; want the old serial %s", got, err, first.serial)
			}
			if n := s.log.count("error"); n != 1 {
				t.Fatalf("%d errors logged, want 1", n)
			}
			if cs := s.m.Certificates(); len(cs) != 1 || cs[0].Serial != first.serial || !strings.Contains(cs[0].Error, filepath.Base(strings.Fields(c.names)[0])) {
				t.Fatalf("Certificates() = %+v", cs)
			}
			start := time.Now()
			c.whole(t, dir, next)
			d := s.waitSerial(t, next.serial, start)
			t.Logf("whole pair served %s after it was whole", d.Round(time.Millisecond))
			old.get(t)
			if s.log.count("BEGIN") != 0 {
				t.Fatal("a log line holds PEM")
			}
			if cs := s.m.Certificates(); len(cs) != 1 || cs[0].Error != "" {
				t.Fatalf("Certificates() = %+v", cs)
			}
		})
	}
}

// runningCopy is step 2 of the rewrite after the certificates' (the node
// Envoy needs to read a secret from a file), as the agent makes each
// copy; the admin stays on TCP port admin.
func runningCopy(t *testing.T, data []byte, admin int) []byte {
	t.Helper()
	out, edits, err := inplace.RunningCopy(data, "envoy.yaml", inplace.AgentAdmin{Host: "127.0.0.1", Port: admin})
	if err != nil || len(edits.NodeSet) != 2 {
		t.Fatalf("the running copy: %+v %v", edits, err)
	}
	return out
}

// writeRunnable writes the bootstrap copy data as an epoch runs it, wired
// to the ADS server srv (inplace.Runnable), into run, and returns its path.
func writeRunnable(t *testing.T, srv *xds.Server, run string, data []byte) string {
	t.Helper()
	data, err := inplace.Runnable(data, "envoy.yaml", inplace.Wire{Socket: srv.Path(), Epoch: "epoch-0-1"})
	if err != nil || data == nil {
		t.Fatalf("the copy wired to the server: %v (nil: it reads nothing over ADS)", err)
	}
	path := filepath.Join(run, "envoy.yaml")
	writeFile(t, path, data)
	return path
}

// caBootstrap: listener "front" (plain HTTP) proxies to cluster "back",
// which reaches the TLS listener over TLS, one request per connection,
// trusting the CA file and checking the DNS name as well (so the rewrite
// makes a combined_validation_context).
func caBootstrap(certFile, keyFile, caFile string, front, back, admin int) []byte {
	b := string(envoykit.TLSBootstrap(certFile, keyFile, back, admin))
	b = strings.Replace(b, "static_resources:\n  listeners:\n", fmt.Sprintf(`static_resources:
  clusters:
  - name: back
    type: STATIC
    connect_timeout: 1s
    max_requests_per_connection: 1
    load_assignment:
      cluster_name: back
      endpoints:
      - lb_endpoints:
        - endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: %d}}}
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        sni: localhost
        common_tls_context:
          validation_context:
            trusted_ca: {filename: %q}
            match_typed_subject_alt_names: [{san_type: DNS, matcher: {exact: localhost}}]
  listeners:
  - name: front
    address: {socket_address: {address: 127.0.0.1, port_value: %d}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: front
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {prefix: "/"}
                route: {cluster: back}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
`, back, caFile, front), 1)
	return []byte(b)
}

// A trusted CA named by file in a cluster is served as a secret too (with
// the validation context's other checks kept): replacing the file changes
// which upstream certificates new connections accept, with the same Envoy.
func TestTrustedCARenewal(t *testing.T) {
	bin := envoykit.Binary(t)
	dir := t.TempDir()
	server, other := newPair(t, farFuture), newPair(t, farFuture)
	certFile, keyFile, caFile := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem"), filepath.Join(dir, "ca.pem")
	writeFile(t, certFile, server.cert)
	writeFile(t, keyFile, server.key)
	writeFile(t, caFile, server.cert) // self-signed: its own CA
	front, back, admin := envoykit.FreePort(t), envoykit.FreePort(t), envoykit.FreePort(t)
	m, srv, run := newManager(t, &logs{t: t})
	m.Poll = time.Hour
	data, err := m.RewriteBootstrap(caBootstrap(certFile, keyFile, caFile, front, back, admin), "envoy.yaml", run)
	if err != nil {
		t.Fatal(err)
	}
	data = runningCopy(t, data, admin)
	if !strings.Contains(string(data), "combined_validation_context") {
		t.Fatalf("no combined_validation_context in:\n%s", data)
	}
	copyPath := writeRunnable(t, srv, run, data)
	out := &envoykit.SyncBuffer{}
	p, err := envoykit.Start(bin, []string{"-c", copyPath, "--disable-hot-restart", "--concurrency", "1", "-l", "warning"}, out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	if err := p.WaitReady(admin, 10*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = m.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	<-certs.Watching(m)
	status := func() int {
		r, err := envoykit.Get(envoykit.URL(front, "/"), 5*time.Second)
		if err != nil {
			return 0
		}
		return r.Code
	}
	if c := status(); c != 200 {
		t.Fatalf("through the cluster trusting the server's certificate: %d", c)
	}
	steps := []struct {
		ca   []byte
		want int
	}{
		{other.cert, 503}, // a CA that did not sign the server's certificate
		{server.cert, 200},
	}
	for _, s := range steps {
		renameInto(t, caFile, s.ca)
		var got int
		if !envoykit.Eventually(2*time.Second, func() bool { got = status(); return got == s.want }) {
			t.Fatalf("2 s after the CA file changed: %d, want %d", got, s.want)
		}
	}
	if !p.Running() {
		t.Fatal("Envoy exited")
	}
}

// A folder link swapped two levels above the files is seen at once (every
// folder above a file is watched for entries made, removed or renamed).
func TestSwappedLinkHigherUp(t *testing.T) {
	dir := t.TempDir()
	first, next := newPair(t, farFuture), newPair(t, farFuture)
	for i, p := range []pair{first, next} {
		sub := filepath.Join(dir, fmt.Sprintf("v%d", i+1), "site")
		if err := os.MkdirAll(sub, 0o700); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(sub, "c.pem"), p.cert)
		writeFile(t, filepath.Join(sub, "k.pem"), p.key)
	}
	symlink(t, "v1", filepath.Join(dir, "current"))
	s := serve(t, filepath.Join(dir, "current", "site", "c.pem"), filepath.Join(dir, "current", "site", "k.pem"))
	if got, err := s.handshake(); err != nil || got != first.serial {
		t.Fatalf("first handshake: %s, %v", got, err)
	}
	symlink(t, "v2", filepath.Join(dir, "current.new"))
	if err := os.Rename(filepath.Join(dir, "current.new"), filepath.Join(dir, "current")); err != nil {
		t.Fatal(err)
	}
	s.waitSerial(t, next.serial, time.Now())
}

// Without inotify (a stand-in: its per-user limit reached), the poll alone
// takes a renewal, and the log says so once.
func TestPollAloneWithoutInotify(t *testing.T) {
	dir := t.TempDir()
	first, next := newPair(t, farFuture), newPair(t, farFuture)
	writeFile(t, filepath.Join(dir, "c.pem"), first.cert)
	writeFile(t, filepath.Join(dir, "k.pem"), first.key)
	s := serveWith(t, filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem"), 300*time.Millisecond, certs.WithoutInotify)
	renameInto(t, filepath.Join(dir, "k.pem"), next.key)
	renameInto(t, filepath.Join(dir, "c.pem"), next.cert)
	s.waitSerial(t, next.serial, time.Now())
	if n := s.log.count("error", "inotify", "read every 300ms"); n != 1 {
		t.Fatalf("%d log lines say the poll replaces inotify, want 1", n)
	}
}

// Without inotify watches (a stand-in: fs.inotify.max_user_watches
// reached), the poll alone takes a renewal, the log says so once, and
// Polled says why (status shows it).
func TestPollWhenWatchesRunOut(t *testing.T) {
	dir := t.TempDir()
	first, next := newPair(t, farFuture), newPair(t, farFuture)
	writeFile(t, filepath.Join(dir, "c.pem"), first.cert)
	writeFile(t, filepath.Join(dir, "k.pem"), first.key)
	s := serveWith(t, filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem"), 300*time.Millisecond, certs.WithoutWatches)
	if !envoykit.Eventually(2*time.Second, func() bool { return strings.Contains(s.m.Polled(), "max_user_watches") }) {
		t.Fatalf("Polled = %q, want why the poll reads the files", s.m.Polled())
	}
	renameInto(t, filepath.Join(dir, "k.pem"), next.key)
	renameInto(t, filepath.Join(dir, "c.pem"), next.cert)
	s.waitSerial(t, next.serial, time.Now())
	if n := s.log.count("error", "not watched", "fs.inotify.max_user_watches", "read every 300ms"); n != 1 {
		t.Fatalf("%d log lines say the folders are polled, want 1", n)
	}
}

// A renewal Envoy refuses (a 1,024-bit RSA key, which Go's crypto/tls
// takes) is NACKed: the log and status give Envoy's
// own reason, new handshakes keep the pair before it, and the next good
// renewal is served.
func TestRenewalEnvoyRejects(t *testing.T) {
	dir := t.TempDir()
	first, refused, next := newPair(t, farFuture), newSmallRSAPair(t, farFuture), newPair(t, farFuture)
	writeFile(t, filepath.Join(dir, "c.pem"), first.cert)
	writeFile(t, filepath.Join(dir, "k.pem"), first.key)
	s := serve(t, filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem"))
	renameInto(t, filepath.Join(dir, "k.pem"), refused.key)
	renameInto(t, filepath.Join(dir, "c.pem"), refused.cert)
	var status string
	if !envoykit.Eventually(5*time.Second, func() bool {
		cs := s.m.Certificates()
		status = fmt.Sprint(cs)
		return len(cs) == 1 && strings.Contains(cs[0].Error, "Envoy rejected the certificate (serial "+refused.serial+")") && cs[0].Serial == first.serial
	}) {
		t.Fatalf("status %s; want Envoy's rejection of serial %s", status, refused.serial)
	}
	t.Logf("status: %s", status)
	if got, err := s.handshake(); err != nil || got != first.serial {
		t.Fatalf("after the rejection new handshakes see %s, %v; want the first pair's %s", got, err, first.serial)
	}
	if n := s.log.count("error", "Envoy rejected the certificate", "the certificate in use (serial "+first.serial+") goes on serving"); n != 1 {
		t.Errorf("%d log lines give Envoy's rejection, want 1", n)
	}
	renameInto(t, filepath.Join(dir, "k.pem"), next.key)
	renameInto(t, filepath.Join(dir, "c.pem"), next.cert)
	s.waitSerial(t, next.serial, time.Now())
	if cs := s.m.Certificates(); len(cs) != 1 || cs[0].Error != "" {
		t.Errorf("status after a good renewal: %+v", cs)
	}
}

// opsADSBootstrap is the TLS bootstrap with an ads_config of the
// operator's own (a control plane on a port nothing answers, which the
// listener does not need).
func opsADSBootstrap(certFile, keyFile string, port, admin int) []byte {
	return []byte(string(envoykit.TLSBootstrap(certFile, keyFile, port, admin)) + `dynamic_resources:
  ads_config: { api_type: GRPC, transport_api_version: V3, grpc_services: [{ envoy_grpc: { cluster_name: operator_cp } }] }
`)
}

// A bootstrap with an ads_config of its own (the operator's control plane)
// reads the certificates' secrets from the agent's server on a gRPC SDS
// stream of their own, the epoch named in each: a renewal reaches new
// handshakes as with the agent's own ADS.
func TestRenewalBesideTheOperatorsADS(t *testing.T) {
	bin := envoykit.Binary(t)
	dir := t.TempDir()
	first, next := newPair(t, farFuture), newPair(t, farFuture)
	certFile, keyFile := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	writeFile(t, certFile, first.cert)
	writeFile(t, keyFile, first.key)
	port, admin, nobody := envoykit.FreePort(t), envoykit.FreePort(t), envoykit.FreePort(t)
	boot := strings.Replace(string(opsADSBootstrap(certFile, keyFile, port, admin)), "static_resources:\n", fmt.Sprintf(`static_resources:
  clusters:
  - name: operator_cp
    type: STATIC
    typed_extension_protocol_options: { envoy.extensions.upstreams.http.v3.HttpProtocolOptions: { "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions, explicit_http_config: { http2_protocol_options: {} } } }
    load_assignment: { cluster_name: operator_cp, endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: %d } } } }] }] }
`, nobody), 1)
	l := &logs{t: t}
	m, srv, run := newManager(t, l)
	m.Poll = time.Hour
	data, err := m.RewriteBootstrap([]byte(boot), "envoy.yaml", run)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "api_config_source") || !strings.Contains(string(data), ads.EpochToken) || !strings.Contains(string(data), ads.ClusterName) {
		t.Fatalf("the copy does not read the secret from the agent on a stream of its own:\n%s", data)
	}
	copyPath := writeRunnable(t, srv, run, runningCopy(t, data, admin))
	if text, _ := os.ReadFile(copyPath); strings.Contains(string(text), ads.EpochToken) {
		t.Fatalf("the epoch's bootstrap still names the token:\n%s", text)
	}
	out := &envoykit.SyncBuffer{}
	p, err := envoykit.Start(bin, []string{"-c", copyPath, "--disable-hot-restart", "--concurrency", "1", "-l", "warning"}, out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	if err := p.WaitReady(admin, 20*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = m.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	<-certs.Watching(m)
	s := &served{m: m, log: l, p: p, addr: "127.0.0.1:" + strconv.Itoa(port)}
	if got, err := s.handshake(); err != nil || got != first.serial {
		t.Fatalf("first handshake: %s, %v", got, err)
	}
	renameInto(t, keyFile, next.key)
	renameInto(t, certFile, next.cert)
	s.waitSerial(t, next.serial, time.Now())
	if st := srv.Status()["epoch-0-1"]; len(st.Streams) == 0 {
		t.Errorf("no stream of the epoch: %+v", srv.Status())
	}
}
