//go:build linux

package main

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// secretToken is planted in the bootstraps below, with a fresh private key:
// neither may reach the agent's log, validate's output or a reload's answer.
const secretToken = "Bearer s3cr3t-t0ken-d0-not-leak"

// newKeyPair returns a fresh self-signed certificate and its private key,
// PEM-encoded.
func newKeyPair(t *testing.T) (certPEM, keyPEM string) {
	c, k, _ := servingPair(t, time.Now().Add(time.Hour))
	return c, k
}

// yamlString quotes s for YAML (JSON strings are YAML strings).
func yamlString(s string) string { return strconv.Quote(s) }

// secretCluster returns a cluster holding a PEM private key and a bearer
// token, to append to the kit's bootstrap (its clusters list comes last).
func secretCluster(certPEM, keyPEM string) string {
	return `  - name: secrets
    type: STATIC
    connect_timeout: 1s
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        common_tls_context:
          tls_certificates:
          - private_key: { inline_string: ` + yamlString(keyPEM) + ` }
            certificate_chain: { inline_string: ` + yamlString(certPEM) + ` }
    health_checks:
    - timeout: 1s
      interval: 1s
      unhealthy_threshold: 1
      healthy_threshold: 1
      http_health_check:
        path: /health
        request_headers_to_add:
        - header: { key: authorization, value: "` + secretToken + `" }
    load_assignment:
      cluster_name: secrets
      endpoints:
      - lb_endpoints:
        - endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 9 } } }
`
}

// secretBootstraps are bootstraps Envoy rejects while repeating them in its
// error: the three type errors (a JSON copy on one line) and a proto
// validation error (a proto text copy over many lines).
var secretBootstraps = []struct{ name, from, to, reason string }{
	{"port_value string", "port_value: 9 }", `port_value: "tenthousand" }`, "port_value"},
	{"port_value bool", "port_value: 9 }", "port_value: true }", "port_value"},
	{"connect_timeout 1x", "connect_timeout: 1s\n    transport_socket", "connect_timeout: 1x\n    transport_socket", "connect_timeout"},
	{"interval 0s", "interval: 1s", "interval: 0s", "Interval: value must be greater than 0s"},
}

func assertNoSecret(t *testing.T, where, text, keyPEM string) {
	t.Helper()
	secrets := []string{"s3cr3t-t0ken", "PRIVATE KEY"}
	for _, l := range strings.Split(keyPEM, "\n") {
		if len(l) > 16 && !strings.HasPrefix(l, "-----") {
			secrets = append(secrets, l[:16])
		}
	}
	for _, s := range secrets {
		if strings.Contains(text, s) {
			t.Errorf("%s holds %q:\n%s", where, s, text)
		}
	}
}

// TestRejectedBootstrapNeverLeaksItsSecrets: for each bootstrap Envoy
// rejects while repeating it, with the real Envoy, nothing of its key or
// token reaches validate's output, a reload's answer, or the agent's log
// (Envoy's own output included) when run starts Envoy on it.
func TestRejectedBootstrapNeverLeaksItsSecrets(t *testing.T) {
	p := startAgent(t, procOptions{})
	certPEM, keyPEM := newKeyPair(t)
	secretCluster := secretCluster(certPEM, keyPEM)
	good, err := os.ReadFile(filepath.Join(p.dir, "envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The same secrets in a good bootstrap: the check below is not vacuous.
	writeFile(t, filepath.Join(p.dir, "envoy.yaml"), string(good)+secretCluster)
	if code, out := p.reload(); code != 0 {
		t.Fatalf("reload of the good bootstrap with secrets: exit %d: %s", code, out)
	}
	for _, b := range secretBootstraps {
		t.Run(b.name, func(t *testing.T) {
			bad := strings.Replace(secretCluster, b.from, b.to, 1)
			if bad == secretCluster {
				t.Fatalf("%q is not in the bootstrap", b.from)
			}
			writeFile(t, filepath.Join(p.dir, "envoy.yaml"), string(good)+bad)
			code, stdout, stderr := runAgent(t, "validate", "--config", p.config)
			if code != 3 || !strings.Contains(stderr, "Envoy rejects this bootstrap") || !strings.Contains(stderr, b.reason) {
				t.Fatalf("validate: exit %d, want 3 with Envoy's reason %q:\n%s%s", code, b.reason, stdout, stderr)
			}
			assertNoSecret(t, "validate's output", stdout+stderr, keyPEM)

			code, out := p.reload()
			if code != 3 || !strings.Contains(out, b.reason) {
				t.Fatalf("reload: exit %d, want 3 naming %q: %s", code, b.reason, out)
			}
			assertNoSecret(t, "the reload's answer", out, keyPEM)
		})
	}
	assertNoSecret(t, "the agent's log", p.stderr.String(), keyPEM)
	if code, _ := p.wait(p.signal(syscall.SIGTERM), 30*time.Second); code != 0 {
		t.Fatalf("stop: exit %d", code)
	}

	// run starts Envoy on the file without validating it first: Envoy's own
	// output, relayed to the agent's log, repeats the bootstrap; with
	// log_as_json, once inside a JSON line with its line breaks escaped.
	jsonConfig := filepath.Join(p.dir, "json.toml")
	writeFile(t, jsonConfig, strings.Replace(readFileT(t, p.config), "[envoy]\n", "[envoy]\nlog_as_json = true\n", 1))
	for _, b := range secretBootstraps {
		for _, config := range []string{p.config, jsonConfig} {
			t.Run("run "+b.name+" "+filepath.Base(config), func(t *testing.T) {
				writeFile(t, filepath.Join(p.dir, "envoy.yaml"), string(good)+strings.Replace(secretCluster, b.from, b.to, 1))
				code, stdout, stderr := runAgent(t, "run", "--config", config)
				if code != 1 || !strings.Contains(stderr, "envoy exited before it was LIVE") {
					t.Fatalf("run: exit %d, want 1 (Envoy exited):\n%s%s", code, stdout, stderr)
				}
				assertNoSecret(t, "run's log", stdout+stderr, keyPEM)
				if !strings.Contains(stderr, "left out") {
					t.Errorf("run's log does not say a configuration dump was left out:\n%s", stderr)
				}
			})
		}
	}
}

// TestEnvoyTraceAndDebugAreRefusedSoSecretsStayOut: at trace, the real
// Envoy repeats the bootstrap's bearer token in its output (listener
// configuration and header dumps), which the agent relays to the journal.
// The agent refuses trace and debug, for the base level and any component,
// in validate, run and a reload; the serving Envoy keeps serving at its
// level, and the token appears 0 times in everything the agent printed.
func TestEnvoyTraceAndDebugAreRefusedSoSecretsStayOut(t *testing.T) {
	certPEM, keyPEM := newKeyPair(t)
	secrets := secretCluster(certPEM, keyPEM)

	// 1. A bare Envoy at trace on the same kind of bootstrap: the token is
	// in its output, so the count below can fail.
	up := envoykit.NewUpstream(t)
	ports := envoykit.NewPorts(t)
	ports.Upstream = up.Port
	dir := t.TempDir()
	// The token is in a listener's route too (a header it adds), as
	// the bootstrap had it.
	bootstrap := envoykit.WriteBootstrap(t, dir, "envoy.yaml", envoykit.BootstrapOptions{Ports: ports, ResponseHeader: secretToken})
	writeFile(t, bootstrap, readFileT(t, bootstrap)+secrets)
	baseID := envoykit.BaseID()
	var bare envoykit.SyncBuffer
	args := envoykit.BareArgs(bootstrap, baseID)
	for i := range args {
		if args[i] == "-l" {
			args[i+1] = "trace"
		}
	}
	proc, err := envoykit.Start(envoykit.Binary(t), args, &bare)
	if err != nil {
		t.Fatal(err)
	}
	defer envoykit.RemoveSharedMemory(baseID)
	defer proc.Kill()
	if err := proc.WaitReady(ports.Admin, 30*time.Second); err != nil {
		t.Fatalf("bare Envoy at trace: %v\n%s", err, bare.String())
	}
	if r, err := envoykit.Get(envoykit.URL(ports.Listener, "/"), 5*time.Second); err != nil || r.Code != 200 {
		t.Fatalf("a request through the bare Envoy: %+v, %v", r, err)
	}
	if !envoykit.Eventually(20*time.Second, func() bool { return strings.Contains(bare.String(), "s3cr3t-t0ken") }) {
		t.Fatalf("a bare Envoy at trace never printed the token: the check below would prove nothing")
	}
	leaks := strings.Count(bare.String(), "s3cr3t-t0ken")
	proc.Kill()
	t.Logf("a bare Envoy at trace printed the bootstrap's token %d times", leaks)

	// 2. The agent, at info, on a bootstrap with the same secrets.
	p := startAgent(t, procOptions{envoy: map[string]string{"log_level": `"info"`}})
	p.rewriteBootstrap(envoykit.BootstrapOptions{ResponseHeader: secretToken})
	writeFile(t, filepath.Join(p.dir, "envoy.yaml"), readFileT(t, filepath.Join(p.dir, "envoy.yaml"))+secrets)
	if code, out := p.reload(); code != 0 {
		t.Fatalf("reload of the bootstrap with secrets: exit %d: %s", code, out)
	}
	base := readFileT(t, p.config)
	levels := []struct{ name, from, to, key string }{
		{"trace", `log_level = "info"`, `log_level = "trace"`, "envoy.log_level"},
		{"debug", `log_level = "info"`, `log_level = "debug"`, "envoy.log_level"},
		{"a component at debug", `log_level = "info"`, `log_level = "info,upstream:debug"`, "envoy.log_level"},
		{"component_log_level trace", `log_level = "info"`, "log_level = \"info\"\ncomponent_log_level = \"http:trace\"", "envoy.component_log_level"},
	}
	var printed strings.Builder
	for _, l := range levels {
		t.Run(l.name, func(t *testing.T) {
			text := strings.Replace(base, l.from, l.to, 1)
			if text == base {
				t.Fatalf("%q is not in the configuration", l.from)
			}
			writeFile(t, p.config, text)
			code, stdout, stderr := runAgent(t, "validate", "--config", p.config)
			printed.WriteString(stdout + stderr)
			if code != 3 || !strings.Contains(stderr, l.key) || !strings.Contains(stderr, "is refused: at debug and trace Envoy logs its configuration") {
				t.Errorf("validate: exit %d, want 3 naming %s and why:\n%s%s", code, l.key, stdout, stderr)
			}
			code, out := p.reload()
			printed.WriteString(out)
			if code != 3 || !strings.Contains(out, l.key) {
				t.Errorf("reload: exit %d, want 3 naming %s: %s", code, l.key, out)
			}
			if r, err := envoykit.Get(envoykit.URL(p.ports.Listener, "/"), 5*time.Second); err != nil || r.Code != 200 {
				t.Errorf("traffic after the refused reload: %+v, %v", r, err)
			}
		})
	}
	writeFile(t, p.config, base)
	if r, err := envoykit.Get(envoykit.URL(p.ports.Listener, "/"), 5*time.Second); err != nil || r.Code != 200 {
		t.Fatalf("a request through the agent's Envoy: %+v, %v", r, err)
	}
	printed.WriteString(p.stderr.String())
	if n := strings.Count(printed.String(), "s3cr3t-t0ken"); n != 0 {
		t.Errorf("the agent's output holds the token %d times", n)
	}
	assertNoSecret(t, "the agent's output", printed.String(), keyPEM)
}

// servingPair is a fresh certificate for localhost, valid until notAfter,
// with its key (PEM) and serial (hex).
func servingPair(t *testing.T, notAfter time.Time) (certPEM, keyPEM, serial string) {
	t.Helper()
	c, k, serial, err := envoykit.ServingPair(notAfter)
	if err != nil {
		t.Fatal(err)
	}
	return c, k, serial
}

// A certificate the bootstrap names by file is served as a secret: a
// renewal reaches new handshakes within 2 s with the same Envoy process and
// no reload, a connection opened before goes on, and `systemctl reload`
// after it (the deploy hooks operators have) serves it too; status, the
// metrics and validate show its expiry. The same with an Envoy whose hot
// restart is compiled out (a stand-in, hotrestartoff_test.go), whose reload
// drains and restarts.
func TestRenewedCertificateServedWithoutReload(t *testing.T) {
	t.Parallel()
	for _, hotRestart := range []bool{true, false} {
		t.Run(fmt.Sprintf("hot restart %v", hotRestart), func(t *testing.T) {
			t.Parallel()
			certDir := t.TempDir()
			certFile, keyFile := filepath.Join(certDir, "cert.pem"), filepath.Join(certDir, "key.pem")
			c1, k1, s1 := servingPair(t, time.Now().Add(90*24*time.Hour))
			writeFile(t, certFile, c1)
			writeFile(t, keyFile, k1)
			bootstrap := filepath.Join(t.TempDir(), "envoy.yaml")
			o := procOptions{bootstrapFile: bootstrap, agent: map[string]string{"min_drain_duration": `"0s"`}}
			if !hotRestart {
				o.envoy = map[string]string{"binary_path": strconv.Quote(writeHotRestartOffStandIn(t, t.TempDir()))}
			}
			p := startAgentWith(t, o, func(ports envoykit.Ports) {
				writeFile(t, bootstrap, string(envoykit.TLSBootstrap(certFile, keyFile, ports.Listener, ports.Admin)))
			})
			if !hotRestart {
				p.waitStatus(30*time.Second, hotRestartOffNote)
			}
			pid := p.envoyPid
			if got, err := envoykit.TLSSerial(p.ports.Listener); err != nil || got != s1 {
				t.Fatalf("first handshake: %s, %v; want serial %s", got, err, s1)
			}

			// What is in use: status, status --json, the metric.
			code, stdout, stderr := runAgent(t, "status", "--config", p.config, "--json")
			var st struct {
				Certificates []struct {
					File     string   `json:"file"`
					Subject  string   `json:"subject"`
					DNSNames []string `json:"dns_names"`
					Serial   string   `json:"serial"`
					NotAfter string   `json:"not_after"`
					DaysLeft int      `json:"days_left"`
				} `json:"certificates"`
			}
			if err := json.Unmarshal([]byte(stdout), &st); code != 0 || err != nil {
				t.Fatalf("status --json: exit %d, %v: %s%s", code, err, stdout, stderr)
			}
			if cs := st.Certificates; len(cs) != 1 || cs[0].File != certFile || cs[0].Subject != "CN=localhost" || !slices.Equal(cs[0].DNSNames, []string{"localhost"}) ||
				cs[0].Serial != s1 || cs[0].DaysLeft < 89 || cs[0].DaysLeft > 90 || cs[0].NotAfter == "" {
				t.Fatalf("status --json certificates: %+v", cs)
			}
			code, stdout, _ = runAgent(t, "status", "--config", p.config)
			if code != 0 || !strings.Contains(stdout, "certificates: "+certFile+": CN=localhost, DNS localhost, not after ") || !strings.Contains(stdout, "days left)") {
				t.Fatalf("status: exit %d:\n%s", code, stdout)
			}
			metric := fmt.Sprintf(`envoy_agent_certificate_expiry_timestamp_seconds{file=%q} `, certFile)
			if !envoykit.Eventually(5*time.Second, func() bool {
				r, err := envoykit.Get(envoykit.URL(p.ports.Prometheus, "/metrics"), 5*time.Second)
				return err == nil && strings.Contains(r.Body, metric)
			}) {
				t.Fatalf("metrics: no %s", metric)
			}

			// A renewal by rename: new handshakes, same Envoy, no reload.
			old, err := tls.Dial("tcp", "127.0.0.1:"+strconv.Itoa(p.ports.Listener), &tls.Config{InsecureSkipVerify: true, ServerName: "localhost"})
			if err != nil {
				t.Fatal(err)
			}
			defer old.Close()
			br := bufio.NewReader(old)
			get := func(what string) {
				t.Helper()
				_ = old.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := old.Write([]byte("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("%s: %v", what, err)
				}
				resp.Body.Close()
			}
			get("the connection opened before the renewal")
			c2, k2, s2 := servingPair(t, time.Now().Add(90*24*time.Hour))
			renewed := time.Now()
			replaceFile(t, keyFile, []byte(k2), 0o644)
			replaceFile(t, certFile, []byte(c2), 0o644)
			var got string
			if !envoykit.Eventually(2*time.Second, func() bool { got, err = envoykit.TLSSerial(p.ports.Listener); return got == s2 }) {
				t.Fatalf("2 s after the renewal new handshakes see %s, %v; want serial %s", got, err, s2)
			}
			t.Logf("renewal to the first new handshake with the new certificate: %s", time.Since(renewed).Round(time.Millisecond))
			if p.servingPid() != pid || !envoykit.Alive(pid) {
				t.Fatalf("Envoy pid %d no longer serves after the renewal", pid)
			}
			get("the connection opened before the renewal, after it")
			if old.ConnectionState().PeerCertificates[0].SerialNumber.Text(16) != s1 {
				t.Fatal("the open connection's certificate changed")
			}
			if strings.Contains(p.stderr.String(), "BEGIN") {
				t.Fatal("PEM in the agent's log")
			}

			// A renewal then a reload, as a deploy hook does; the new
			// certificate expires in 5 days, which validate warns about.
			old.Close() // a reload without hot restart would wait for it
			c3, k3, s3 := servingPair(t, time.Now().Add(5*24*time.Hour))
			replaceFile(t, keyFile, []byte(k3), 0o644)
			replaceFile(t, certFile, []byte(c3), 0o644)
			if code, out := p.reload(); code != 0 {
				t.Fatalf("reload after the renewal: exit %d: %s", code, out)
			}
			if got, err := envoykit.TLSSerial(p.ports.Listener); err != nil || got != s3 {
				t.Fatalf("after the reload new handshakes see %s, %v; want serial %s", got, err, s3)
			}
			p.envoyPid = p.servingPid()
			code, stdout, stderr = runAgent(t, "validate", "--config", p.config)
			if code != 0 || !strings.Contains(stdout, "warning: certificate "+certFile+" (CN=localhost) expires on ") {
				t.Fatalf("validate: exit %d: %s%s", code, stdout, stderr)
			}
		})
	}
}

// TestStaticSecretReloadsInPlace: a certificate inline in a static secret
// (static_resources.secrets) changes with `envoy-agent reload` in the
// Envoy that serves: the reload says so, new handshakes see the new
// certificate, a TLS connection opened before goes on; a certificate with
// another's key is refused with Envoy still serving the previous one; no
// key reaches the answers or the log.
func TestStaticSecretReloadsInPlace(t *testing.T) {
	t.Parallel()
	pair := func() (string, string, string) { return servingPair(t, time.Now().Add(time.Hour)) }
	c1, k1, s1 := pair()
	bootstrap := filepath.Join(t.TempDir(), "envoy.yaml")
	p := startAgentWith(t, procOptions{bootstrapFile: bootstrap, agent: map[string]string{"reload_method": `"auto"`}}, func(ports envoykit.Ports) {
		writeFile(t, bootstrap, string(envoykit.SecretTLSBootstrap(c1, k1, ports.Listener, ports.Admin)))
	})
	if got, err := envoykit.TLSSerial(p.ports.Listener); err != nil || got != s1 {
		t.Fatalf("first handshake: %s, %v; want serial %s", got, err, s1)
	}
	open, err := tls.Dial("tcp", "127.0.0.1:"+strconv.Itoa(p.ports.Listener), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	br := bufio.NewReader(open)
	get := func(what string) {
		t.Helper()
		_ = open.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := open.Write([]byte("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 || resp.Close {
			t.Fatalf("%s: %v %v", what, resp, err)
		}
		resp.Body.Close()
	}
	get("the connection opened first")

	c2, k2, s2 := pair()
	replaceFile(t, bootstrap, envoykit.SecretTLSBootstrap(c2, k2, p.ports.Listener, p.ports.Admin), 0o644)
	code, out := p.reload()
	if code != 0 || !strings.Contains(out, "reloaded in place: secrets updated srv; epoch 0 keeps serving") {
		t.Fatalf("reload of a new certificate: exit %d: %s", code, out)
	}
	if got, err := envoykit.TLSSerial(p.ports.Listener); err != nil || got != s2 {
		t.Errorf("after the reload new handshakes see %s, %v; want serial %s", got, err, s2)
	}
	if pid := p.servingPid(); pid != p.envoyPid || !envoykit.Alive(pid) {
		t.Errorf("after the reload Envoy pid %d serves; want %d", pid, p.envoyPid)
	}
	get("the connection opened first, after the reload")
	assertNoSecret(t, "the reload's answer", out, k2)

	c3, _, _ := pair()
	replaceFile(t, bootstrap, envoykit.SecretTLSBootstrap(c3, k2, p.ports.Listener, p.ports.Admin), 0o644)
	code, out = p.reload()
	if code == 0 {
		t.Fatalf("reload of a certificate with another's key: exit 0: %s", out)
	}
	if got, err := envoykit.TLSSerial(p.ports.Listener); err != nil || got != s2 {
		t.Errorf("after the refused reload new handshakes see %s, %v; want serial %s", got, err, s2)
	}
	get("the connection opened first, after the refused reload")
	assertNoSecret(t, "the refused reload's answer", out, k2)
	assertNoSecret(t, "the agent's log", p.stderr.String(), k2)
	t.Logf("refused: %s", out)
}
