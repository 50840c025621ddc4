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
)

const domain = "envoy-agent.test"

var agentBin string

// TestMain builds the agent (or takes $ENVOY_AGENT_BIN, as the other
// packages' tests do), unless pebble or both clients are missing: the test
// then skips.
func TestMain(m *testing.M) {
	_, errCertbot := exec.LookPath("certbot")
	_, errLego := exec.LookPath("lego")
	_, errPebble := exec.LookPath("pebble")
	if errCertbot != nil && errLego != nil || errPebble != nil || envoykit.UnitTier() {
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

// tool finds one of the ACME programs (`make acme-tools` installs
// Debian's certbot, lego and pebble); the test skips without it.
func tool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s is not installed (make acme-tools installs Debian's certbot, lego and pebble)", name)
	}
	return path
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

// acme is pebble running, and what its clients need to reach it.
type acme struct {
	t            *testing.T
	dir, caFile  string
	dirURL, mgmt string
	httpPort     int
	env          []string
	api          *http.Client
}

func startPebble(t *testing.T) *acme {
	t.Helper()
	pebble := tool(t, "pebble")
	_ = envoykit.Binary(t) // skips in make test-unit
	dir := t.TempDir()
	caFile, keyFile := selfSigned(t, dir)
	listen, mgmt, httpPort, tlsPort := envoykit.FreePort(t), envoykit.FreePort(t), envoykit.FreePort(t), envoykit.FreePort(t)
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
	out := &envoykit.SyncBuffer{}
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
	a := &acme{t: t, dir: dir, caFile: caFile, dirURL: fmt.Sprintf("https://127.0.0.1:%d/dir", listen),
		mgmt: fmt.Sprintf("https://127.0.0.1:%d", mgmt), httpPort: httpPort,
		api: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}}
	if !envoykit.Eventually(10*time.Second, func() bool {
		r, err := a.api.Get(a.dirURL)
		if err == nil {
			r.Body.Close()
		}
		return err == nil && r.StatusCode == 200
	}) {
		t.Fatalf("pebble's directory %s did not answer", a.dirURL)
	}
	// certbot trusts pebble's API through REQUESTS_CA_BUNDLE, lego
	// through LEGO_CA_CERTIFICATES.
	a.env = []string{"REQUESTS_CA_BUNDLE=" + caFile, "LEGO_CA_CERTIFICATES=" + caFile}
	return a
}

// run runs an ACME client.
func (a *acme) run(t *testing.T, bin string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), a.env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
}

// acmeClient is a renewal tool as an operator runs it.
type acmeClient struct {
	name string
	// obtain gets the first certificate; renew forces a renewal. Both
	// return the files the bootstrap names.
	obtain, renew func(t *testing.T, a *acme, bin, dir string)
	files         func(dir string) (certFile, keyFile string)
}

var clients = []acmeClient{
	{
		// certbot re-points its live/ links one at a time (docs of this
		// machine: a reader sees a new key beside an old certificate).
		name: "certbot",
		obtain: func(t *testing.T, a *acme, bin, dir string) {
			a.run(t, bin, append([]string{"certonly", "-d", domain}, certbotArgs(a, dir)...)...)
		},
		renew: func(t *testing.T, a *acme, bin, dir string) {
			a.run(t, bin, append([]string{"renew", "--force-renewal", "--no-random-sleep-on-renew"}, certbotArgs(a, dir)...)...)
		},
		files: func(dir string) (string, string) {
			live := filepath.Join(dir, "etc", "live", domain)
			return filepath.Join(live, "fullchain.pem"), filepath.Join(live, "privkey.pem")
		},
	},
	{
		// lego writes its files in place, the certificate before the key.
		name: "lego",
		obtain: func(t *testing.T, a *acme, bin, dir string) {
			a.run(t, bin, append(legoArgs(a, dir), "run")...)
		},
		renew: func(t *testing.T, a *acme, bin, dir string) {
			a.run(t, bin, append(legoArgs(a, dir), "renew", "--days", "100000", "--no-random-sleep")...)
		},
		files: func(dir string) (string, string) {
			certs := filepath.Join(dir, "lego", "certificates")
			return filepath.Join(certs, domain+".crt"), filepath.Join(certs, domain+".key")
		},
	},
}

func certbotArgs(a *acme, dir string) []string {
	return []string{"--config-dir", filepath.Join(dir, "etc"), "--work-dir", filepath.Join(dir, "work"), "--logs-dir", filepath.Join(dir, "logs"),
		"--server", a.dirURL, "--non-interactive", "--agree-tos", "--register-unsafely-without-email",
		"--standalone", "--http-01-port", strconv.Itoa(a.httpPort), "--http-01-address", "127.0.0.1"}
}

func legoArgs(a *acme, dir string) []string {
	return []string{"--server", a.dirURL, "--email", "ops@" + domain, "--accept-tos", "--domains", domain,
		"--http", "--http.port", "127.0.0.1:" + strconv.Itoa(a.httpPort), "--path", filepath.Join(dir, "lego")}
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

// TestRenewalUnderLoad: a certificate certbot (or lego) obtained from
// pebble serves through the agent; each forced renewal reaches new
// handshakes within 2 s of the new pair being whole on disk, with the same
// Envoy, a connection opened before goes on, and clients that do not retry
// see no failure.
func TestRenewalUnderLoad(t *testing.T) {
	a := startPebble(t)
	for _, cl := range clients {
		t.Run(cl.name, func(t *testing.T) {
			renewUnderLoad(t, a, cl)
		})
	}
}

// pairSerial is the serial of the pair on disk, or "" while it is not
// whole.
func pairSerial(certFile, keyFile string) string {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return ""
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return ""
	}
	return leaf.SerialNumber.Text(16)
}

func renewUnderLoad(t *testing.T, a *acme, cl acmeClient) {
	bin := tool(t, cl.name)
	dir := t.TempDir()
	cl.obtain(t, a, bin, dir)
	certFile, keyFile := cl.files(dir)
	roots := a.roots()

	admin, port, status := envoykit.FreePort(t), envoykit.FreePort(t), envoykit.FreePort(t)
	bootFile := filepath.Join(dir, "envoy.yaml")
	writeFile(t, bootFile, string(envoykit.TLSBootstrap(certFile, keyFile, port, admin)))
	baseID := envoykit.BaseID()
	config := filepath.Join(dir, "config.toml")
	writeFile(t, config, fmt.Sprintf("[envoy]\nbinary_path = %q\nconfig_path = %q\nadmin_port = %d\nbase_id = %d\nconcurrency = 1\nlog_level = \"warning\"\n[agent]\nstatus_port = %d\nrun_dir = %q\n",
		envoykit.Binary(t), bootFile, admin, baseID, status, filepath.Join(dir, "run")))
	log := &envoykit.SyncBuffer{}
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
	if !envoykit.Eventually(30*time.Second, func() bool { serial, err = c.request(); return err == nil }) {
		t.Fatalf("no TLS answer with the certificate %s obtained: %v", cl.name, err)
	}
	pid := envoyPid(t, config, certFile)

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
	defer func() { stop(); wg.Wait() }()
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
		// When the new pair is whole on disk (certbot re-points its links
		// one at a time, lego writes the certificate before the key).
		whole := make(chan time.Time, 1)
		watchCtx, stopWatch := context.WithCancel(context.Background())
		go func() {
			for watchCtx.Err() == nil {
				if s := pairSerial(certFile, keyFile); s != "" && s != serial {
					whole <- time.Now()
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
		cl.renew(t, a, bin, dir)
		var at time.Time
		select {
		case at = <-whole:
		case <-time.After(5 * time.Second):
			stopWatch()
			t.Fatalf("renewal %d: no new whole pair on disk", i+1)
		}
		stopWatch()
		var got string
		if !envoykit.Eventually(5*time.Second, func() bool { got, err = c.request(); return err == nil && got != serial }) {
			t.Fatalf("renewal %d: new handshakes still see serial %s, %v", i+1, got, err)
		}
		d := time.Since(at)
		took = append(took, d)
		t.Logf("renewal %d: serial %s -> %s; first new handshake %s after the new pair was whole on disk", i+1, serial, got, d.Round(time.Millisecond))
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
		if p := envoyPid(t, config, certFile); p != pid {
			t.Fatalf("renewal %d: Envoy pid %d serves, want %d (no new Envoy)", i+1, p, pid)
		}
	}
	stop()
	wg.Wait()
	slices.Sort(took)
	t.Logf("%s: %d forced renewals, first new handshake median %s, max %s after the new pair was whole; %d requests (each a new TLS connection), %d failed",
		cl.name, len(took), took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond), ok.Load(), failed.Load())
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
	// The renewal tools write a pair in several steps; the agent's settle
	// should have hidden the moments it was not whole.
	t.Logf("renewals refused as half-done in the agent's log: %d", strings.Count(log.String(), "renewal not taken"))
}

// envoyPid is the serving Envoy's pid, from `envoy-agent status --json`.
func envoyPid(t *testing.T, config, certFile string) int {
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
	if len(st.Certificates) != 1 || st.Certificates[0].File != certFile {
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
