//go:build linux

package acme

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
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
	"github.com/envoy-agent/envoy-agent/internal/testenvoy"
)

const domain = "envoy-agent.test"

var agentBin string

// TestMain builds the agent (or takes $ENVOY_AGENT_BIN, as the other
// packages' tests do), unless certbot or pebble is missing: the test then
// skips.
func TestMain(m *testing.M) {
	_, errCertbot := exec.LookPath("certbot")
	_, errPebble := exec.LookPath("pebble")
	if errCertbot != nil || errPebble != nil || envoykit.UnitTier() {
		os.Exit(m.Run())
	}
	if agentBin = os.Getenv("ENVOY_AGENT_BIN"); agentBin != "" {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "acme-agent-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	agentBin = filepath.Join(dir, "envoy-agent")
	build := exec.Command("go", "build", "-o", agentBin, "../../cmd/envoy-agent")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build the agent:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// tools finds certbot and pebble (`make acme-tools` installs Debian's).
func tools(t *testing.T) (certbot, pebble string) {
	t.Helper()
	var err error
	if certbot, err = exec.LookPath("certbot"); err != nil {
		t.Skip("certbot is not installed (make acme-tools installs Debian's certbot and pebble)")
	}
	if pebble, err = exec.LookPath("pebble"); err != nil {
		t.Skip("pebble is not installed (make acme-tools installs Debian's certbot and pebble)")
	}
	return certbot, pebble
}

// selfSigned writes a key and a self-signed certificate for 127.0.0.1:
// pebble's own API certificate (its package ships none).
func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pebble"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "pebble-cert.pem"), filepath.Join(dir, "pebble-key.pem")
	writeFile(t, certFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	writeFile(t, keyFile, string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})))
	return certFile, keyFile
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// acme is pebble running, and certbot's command line against it.
type acme struct {
	t            *testing.T
	certbot      string
	dir, caFile  string
	dirURL, mgmt string
	httpPort     int
	env          []string
	api          *http.Client
	certbotDirs  []string
}

func startPebble(t *testing.T) *acme {
	t.Helper()
	certbot, pebble := tools(t)
	_ = testenvoy.Binary(t) // skips in make test-unit
	dir := t.TempDir()
	caFile, keyFile := selfSigned(t, dir)
	listen, mgmt, httpPort, tlsPort := testenvoy.FreePort(t), testenvoy.FreePort(t), testenvoy.FreePort(t), testenvoy.FreePort(t)
	cfg := map[string]any{"pebble": map[string]any{
		"listenAddress": fmt.Sprintf("127.0.0.1:%d", listen), "managementListenAddress": fmt.Sprintf("127.0.0.1:%d", mgmt),
		"certificate": caFile, "privateKey": keyFile, "httpPort": httpPort, "tlsPort": tlsPort,
		"ocspResponderURL": "", "externalAccountBindingRequired": false,
	}}
	b, _ := json.Marshal(cfg)
	cfgFile := filepath.Join(dir, "pebble.json")
	writeFile(t, cfgFile, string(b))
	// No challenge validation, no random delays, no nonces rejected on
	// purpose (certbot 2.1.0 fails on those): docs of this machine.
	env := []string{"PEBBLE_VA_ALWAYS_VALID=1", "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0"}
	out := &testenvoy.SyncBuffer{}
	p, err := envoykit.Start(pebble, []string{"-config", cfgFile}, out, env...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("pebble:\n%s", out)
		}
	})
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(caFile)
	pool.AppendCertsFromPEM(caPEM)
	a := &acme{t: t, certbot: certbot, dir: dir, caFile: caFile, dirURL: fmt.Sprintf("https://127.0.0.1:%d/dir", listen),
		mgmt: fmt.Sprintf("https://127.0.0.1:%d", mgmt), httpPort: httpPort,
		api: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}}
	if !testenvoy.Eventually(10*time.Second, func() bool {
		r, err := a.api.Get(a.dirURL)
		if err == nil {
			r.Body.Close()
		}
		return err == nil && r.StatusCode == 200
	}) {
		t.Fatalf("pebble's directory %s did not answer", a.dirURL)
	}
	a.env = []string{"REQUESTS_CA_BUNDLE=" + caFile}
	a.certbotDirs = []string{"--config-dir", filepath.Join(dir, "etc"), "--work-dir", filepath.Join(dir, "work"), "--logs-dir", filepath.Join(dir, "logs")}
	return a
}

// run runs certbot with args (and its folders, pebble's URL).
func (a *acme) run(args ...string) {
	a.t.Helper()
	args = append(args, a.certbotDirs...)
	args = append(args, "--server", a.dirURL, "--non-interactive", "--agree-tos", "--register-unsafely-without-email",
		"--standalone", "--http-01-port", strconv.Itoa(a.httpPort), "--http-01-address", "127.0.0.1")
	cmd := exec.Command(a.certbot, args...)
	cmd.Env = append(os.Environ(), a.env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		a.t.Fatalf("certbot %s: %v\n%s", strings.Join(args[:2], " "), err, out)
	}
}

// roots are the issuing chain's roots, from pebble's management API.
func (a *acme) roots() *x509.CertPool {
	a.t.Helper()
	pool := x509.NewCertPool()
	for _, p := range []string{"/roots/0", "/intermediates/0"} {
		r, err := a.api.Get(a.mgmt + p)
		if err != nil {
			a.t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if !pool.AppendCertsFromPEM(b) {
			a.t.Fatalf("pebble %s: no certificate", p)
		}
	}
	return pool
}

func (a *acme) live(name string) string {
	return filepath.Join(a.dir, "etc", "live", domain, name)
}

func bootstrap(certFile, keyFile string, admin, port int) string {
	return fmt.Sprintf(`admin:
  address: {socket_address: {address: 127.0.0.1, port_value: %d}}
static_resources:
  listeners:
  - name: tls
    address: {socket_address: {address: 127.0.0.1, port_value: %d}}
    filter_chains:
    - transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
          common_tls_context:
            tls_certificates:
            - certificate_chain: {filename: %q}
              private_key: {filename: %q}
      filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: tls
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {prefix: "/"}
                direct_response: {status: 200, body: {inline_string: ok}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
`, admin, port, certFile, keyFile)
}

// client makes TLS connections that verify the chain pebble issued.
type client struct {
	addr string
	cfg  *tls.Config
}

// request opens a new connection, sends one request and returns the
// serial the handshake saw. It never retries.
func (c client) request() (string, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", c.addr, c.cfg)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("GET / HTTP/1.1\r\nHost: " + domain + "\r\nConnection: close\r\n\r\n")); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("status %d", resp.StatusCode)
	}
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Text(16), nil
}

// TestCertbotRenewalUnderLoad: a certificate certbot obtained from pebble
// serves through the agent; each `certbot renew --force-renewal` reaches
// new handshakes within 2 s with the same Envoy, a connection opened
// before goes on, and clients that do not retry see no failure.
func TestCertbotRenewalUnderLoad(t *testing.T) {
	a := startPebble(t)
	a.run("certonly", "-d", domain)
	roots := a.roots()

	dir := t.TempDir()
	admin, port, status := testenvoy.FreePort(t), testenvoy.FreePort(t), testenvoy.FreePort(t)
	bootFile := filepath.Join(dir, "envoy.yaml")
	writeFile(t, bootFile, bootstrap(a.live("fullchain.pem"), a.live("privkey.pem"), admin, port))
	baseID := testenvoy.BaseID()
	config := filepath.Join(dir, "config.toml")
	writeFile(t, config, fmt.Sprintf("[envoy]\nbinary_path = %q\nconfig_path = %q\nadmin_port = %d\nbase_id = %d\nconcurrency = 1\nlog_level = \"warning\"\n[agent]\nstatus_port = %d\nrun_dir = %q\n",
		testenvoy.Binary(t), bootFile, admin, baseID, status, filepath.Join(dir, "run")))
	log := &testenvoy.SyncBuffer{}
	agent, err := envoykit.Start(agentBin, []string{"run", "--config", config}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		agent.Signal(15)
		_ = agent.Wait(context.Background(), 30*time.Second)
		envoykit.RemoveSharedMemory(baseID)
		if t.Failed() {
			t.Logf("agent:\n%s", log)
		}
	})
	c := client{addr: "127.0.0.1:" + strconv.Itoa(port), cfg: &tls.Config{RootCAs: roots, ServerName: domain}}
	var serial string
	if !testenvoy.Eventually(30*time.Second, func() bool { serial, err = c.request(); return err == nil }) {
		t.Fatalf("no TLS answer with the certificate certbot obtained: %v", err)
	}
	pid := envoyPid(t, config)

	// The load: clients that do not retry, each request a new connection
	// and handshake; one connection kept open across every renewal.
	var ok, failed atomic.Int64
	var failures sync.Map
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				if _, err := c.request(); err != nil {
					failed.Add(1)
					failures.Store(err.Error(), true)
				} else {
					ok.Add(1)
				}
			}
		})
	}
	kept, err := tls.Dial("tcp", c.addr, c.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	keptReader := bufio.NewReader(kept)
	keptGet := func() error {
		_ = kept.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := kept.Write([]byte("GET / HTTP/1.1\r\nHost: " + domain + "\r\n\r\n")); err != nil {
			return err
		}
		resp, err := http.ReadResponse(keptReader, nil)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil
	}
	if err := keptGet(); err != nil {
		t.Fatal(err)
	}
	first := serial

	var took []time.Duration
	for i := range 3 {
		before, _ := os.Readlink(a.live("fullchain.pem"))
		// When certbot re-points the last of its links (cert, privkey,
		// chain, fullchain, in that order): the pair is whole from then on.
		changed := make(chan time.Time, 1)
		go func() {
			for {
				if now, err := os.Readlink(a.live("fullchain.pem")); err == nil && now != before {
					changed <- time.Now()
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
		a.run("renew", "--force-renewal", "--no-random-sleep-on-renew")
		at := <-changed
		var got string
		if !testenvoy.Eventually(5*time.Second, func() bool { got, err = c.request(); return err == nil && got != serial }) {
			t.Fatalf("renewal %d: new handshakes still see serial %s, %v", i+1, got, err)
		}
		d := time.Since(at)
		took = append(took, d)
		t.Logf("renewal %d: serial %s -> %s; first new handshake %s after certbot's last link", i+1, serial, got, d.Round(time.Millisecond))
		if d > 2*time.Second {
			t.Errorf("renewal %d took %s to reach new handshakes, more than 2 s", i+1, d)
		}
		serial = got
		if err := keptGet(); err != nil {
			t.Fatalf("the connection kept open across renewal %d: %v", i+1, err)
		}
		if s := kept.ConnectionState().PeerCertificates[0].SerialNumber.Text(16); s != first {
			t.Fatalf("the kept connection's certificate changed to %s", s)
		}
		if p := envoyPid(t, config); p != pid {
			t.Fatalf("renewal %d: Envoy pid %d serves, want %d (no new Envoy)", i+1, p, pid)
		}
	}
	stop()
	wg.Wait()
	slices.Sort(took)
	t.Logf("certbot renew --force-renewal x%d: first new handshake median %s, max %s after the last link; %d requests (each a new TLS connection), %d failed",
		len(took), took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond), ok.Load(), failed.Load())
	if failed.Load() != 0 {
		var errs []string
		failures.Range(func(k, _ any) bool { errs = append(errs, k.(string)); return true })
		t.Fatalf("%d of %d requests failed: %v", failed.Load(), ok.Load()+failed.Load(), errs)
	}
	if ok.Load() == 0 {
		t.Fatal("the load made no request")
	}
	if strings.Contains(log.String(), "BEGIN") {
		t.Fatal("PEM in the agent's log")
	}
	// certbot re-points its links one at a time; the agent's settle should
	// have hidden the moments of a new key beside the old chain.
	t.Logf("renewals refused as half-done in the agent's log: %d", strings.Count(log.String(), "renewal not taken"))
}

// envoyPid is the serving Envoy's pid, from `envoy-agent status --json`.
func envoyPid(t *testing.T, config string) int {
	t.Helper()
	out, err := exec.Command(agentBin, "status", "--config", config, "--json").Output()
	if err != nil {
		t.Fatalf("envoy-agent status: %v", err)
	}
	var st struct {
		Epochs []struct {
			Pid  int    `json:"pid"`
			Role string `json:"role"`
		} `json:"epochs"`
		Certificates []struct {
			File string `json:"file"`
		} `json:"certificates"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("status --json: %v", err)
	}
	if len(st.Certificates) != 1 || !strings.HasSuffix(st.Certificates[0].File, "/live/"+domain+"/fullchain.pem") {
		t.Fatalf("status --json certificates: %+v", st.Certificates)
	}
	for _, e := range st.Epochs {
		if e.Role == "serving" {
			return e.Pid
		}
	}
	t.Fatalf("status --json: no serving epoch: %s", out)
	return 0
}
