//go:build linux

package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
	"github.com/envoy-agent/envoy-agent/internal/testenvoy"
)

// secretToken is planted in the bootstraps below, with a fresh private key:
// neither may reach the agent's log, validate's output or a reload's answer.
const secretToken = "Bearer s3cr3t-t0ken-d0-not-leak"

// newKeyPair returns a fresh self-signed certificate and its private key,
// PEM-encoded.
func newKeyPair(t *testing.T) (certPEM, keyPEM string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "secrets.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
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
	up := testenvoy.NewUpstream(t)
	ports := testenvoy.NewPorts(t)
	ports.Upstream = up.Port
	dir := t.TempDir()
	// The token is in a listener's route too (a header it adds), as
	// the bootstrap had it.
	bootstrap := testenvoy.WriteBootstrap(t, dir, "envoy.yaml", testenvoy.BootstrapOptions{Ports: ports, ResponseHeader: secretToken})
	writeFile(t, bootstrap, readFileT(t, bootstrap)+secrets)
	baseID := testenvoy.BaseID()
	var bare testenvoy.SyncBuffer
	args := envoykit.BareArgs(bootstrap, baseID)
	for i := range args {
		if args[i] == "-l" {
			args[i+1] = "trace"
		}
	}
	proc, err := envoykit.Start(testenvoy.Binary(t), args, &bare)
	if err != nil {
		t.Fatal(err)
	}
	defer envoykit.RemoveSharedMemory(baseID)
	defer proc.Kill()
	if err := proc.WaitReady(ports.Admin, 30*time.Second); err != nil {
		t.Fatalf("bare Envoy at trace: %v\n%s", err, bare.String())
	}
	if r, err := testenvoy.Get(testenvoy.URL(ports.Listener, "/"), 5*time.Second); err != nil || r.Code != 200 {
		t.Fatalf("a request through the bare Envoy: %+v, %v", r, err)
	}
	if !testenvoy.Eventually(20*time.Second, func() bool { return strings.Contains(bare.String(), "s3cr3t-t0ken") }) {
		t.Fatalf("a bare Envoy at trace never printed the token: the check below would prove nothing")
	}
	leaks := strings.Count(bare.String(), "s3cr3t-t0ken")
	proc.Kill()
	t.Logf("a bare Envoy at trace printed the bootstrap's token %d times", leaks)

	// 2. The agent, at info, on a bootstrap with the same secrets.
	p := startAgent(t, procOptions{envoy: map[string]string{"log_level": `"info"`}})
	p.rewriteBootstrap(testenvoy.BootstrapOptions{ResponseHeader: secretToken})
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
			if r, err := testenvoy.Get(testenvoy.URL(p.ports.Listener, "/"), 5*time.Second); err != nil || r.Code != 200 {
				t.Errorf("traffic after the refused reload: %+v, %v", r, err)
			}
		})
	}
	writeFile(t, p.config, base)
	if r, err := testenvoy.Get(testenvoy.URL(p.ports.Listener, "/"), 5*time.Second); err != nil || r.Code != 200 {
		t.Fatalf("a request through the agent's Envoy: %+v, %v", r, err)
	}
	printed.WriteString(p.stderr.String())
	if n := strings.Count(printed.String(), "s3cr3t-t0ken"); n != 0 {
		t.Errorf("the agent's output holds the token %d times", n)
	}
	assertNoSecret(t, "the agent's output", printed.String(), keyPEM)
}
