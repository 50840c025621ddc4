package xds

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/envoy/xds/ads"
	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// testLog is a Logger into the test's log.
type testLog struct{ t testing.TB }

func (l testLog) Infof(f string, a ...any)  { l.t.Logf("info: "+f, a...) }
func (l testLog) Warnf(f string, a ...any)  { l.t.Logf("warn: "+f, a...) }
func (l testLog) Errorf(f string, a ...any) { l.t.Logf("error: "+f, a...) }

// quietLog logs nothing: the scale tests' thousand subscriptions.
type quietLog struct{}

func (quietLog) Infof(string, ...any)  {}
func (quietLog) Warnf(string, ...any)  {}
func (quietLog) Errorf(string, ...any) {}

// listen starts a Server in a private folder of the test.
func listen(t testing.TB, log Logger) *Server {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := Listen(dir, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// envoy is a real Envoy of a test, with its admin port.
type envoy struct {
	*envoykit.Process
	admin int
	out   *envoykit.SyncBuffer
}

// startEnvoy runs a bare Envoy on the bootstrap text (an admin on a free
// port is added) with extra arguments, and waits until it is LIVE.
func startEnvoy(t testing.TB, bootstrap string, baseID uint32, extra ...string) (*envoy, time.Duration) {
	t.Helper()
	admin := envoykit.FreePort(t)
	path := filepath.Join(t.TempDir(), "envoy.yaml")
	data := fmt.Sprintf("admin: {address: {socket_address: {address: 127.0.0.1, port_value: %d}}}\n%s", admin, bootstrap)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	out := new(envoykit.SyncBuffer)
	args := append(envoykit.BareArgs(path, baseID), extra...)
	p, err := envoykit.Start(envoykit.Binary(t), args, out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		<-p.Done()
		if t.Failed() {
			t.Logf("envoy %d output:\n%s", p.Pid(), tail(out.String(), 4000))
		}
	})
	if err := p.WaitReady(admin, 60*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, tail(out.String(), 4000))
	}
	return &envoy{Process: p, admin: admin, out: out}, time.Since(p.Started())
}

// tail is the end of Envoy's output, and first its critical lines (cut:
// a failed configuration is echoed whole).
func tail(s string, n int) string {
	var crit []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, "critical") {
			crit = append(crit, l[:min(len(l), 600)])
		}
	}
	if len(crit) > 0 {
		return strings.Join(crit, "\n")
	}
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// configDump is Envoy's config_dump of one resource kind, as JSON.
func (e *envoy) configDump(t testing.TB, resource string) map[string]any {
	t.Helper()
	r, err := envoykit.Get(envoykit.URL(e.admin, "/config_dump?resource="+resource), 10*time.Second)
	if err != nil || r.Code != http.StatusOK {
		t.Fatalf("config_dump %s: %v %d %s", resource, err, r.Code, r.Body)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(r.Body), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// rss is the process's resident set, in KB.
func rss(t testing.TB, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// inotifyInstances counts the process's inotify instances.
func inotifyInstances(t testing.TB, pid int) int {
	t.Helper()
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && l == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

// pair is a fresh self-signed certificate for name, with its key, both PEM,
// and its serial (hex).
func pair(t testing.TB, name string) (cert, key, serial string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: n, Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd})), n.Text(16)
}

// handshakeSerial is the serial of the certificate a new TLS handshake to
// port with SNI name sees.
func handshakeSerial(port int, name string) (string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", "127.0.0.1:"+strconv.Itoa(port), &tls.Config{InsecureSkipVerify: true, ServerName: name})
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Text(16), nil
}

// keptAlive is one HTTP/1.1 connection kept open across requests: a
// connection that a change must not close.
type keptAlive struct {
	conn net.Conn
	r    *bufio.Reader
	host string
}

func dialKeptAlive(t testing.TB, conn net.Conn, host string) *keptAlive {
	t.Helper()
	k := &keptAlive{conn: conn, r: bufio.NewReader(conn), host: host}
	t.Cleanup(func() { conn.Close() })
	return k
}

// get sends one request on the connection and returns the body and
// whether Envoy asked to close the connection.
func (k *keptAlive) get() (body string, closing bool, err error) {
	_ = k.conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(k.conn, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", k.host); err != nil {
		return "", false, err
	}
	resp, err := http.ReadResponse(k.r, nil)
	if err != nil {
		return "", false, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), resp.Close, err
}

// yamlText is the YAML of a node.
func yamlText(t testing.TB, n *yaml.Node) string {
	t.Helper()
	b, err := yaml.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// indent indents every line of s by n spaces.
func indent(s string, n int) string {
	pad := strings.Repeat(" ", n)
	return pad + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+pad)
}

// adsBootstrap is a bootstrap's node, xDS cluster and ads_config for the
// epoch, followed by static_resources holding clusters (more YAML list
// items, indented for static_resources.clusters) and listeners.
func adsBootstrap(t testing.TB, s *Server, epoch, clusters, listeners string) string {
	t.Helper()
	p, err := ads.Bootstrap(s.Path(), epoch, nil)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("node: {id: test, cluster: test}\ndynamic_resources:\n  ads_config:\n%s\nstatic_resources:\n  clusters:\n  -\n%s\n%s  listeners:\n%s\n",
		indent(yamlText(t, p.ADSConfig), 4), indent(yamlText(t, p.Cluster), 4), clusters, listeners)
}

// withTimeout is a context for one wait of a test.
func withTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
