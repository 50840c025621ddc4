//go:build linux

package certs_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/envoy/certs"
	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

func TestRewrite(t *testing.T) {
	run := "/run/agent"
	cases := []struct {
		name     string
		in       string
		secrets  int
		skipped  int
		contains []string // in the output
		absent   []string
	}{
		{name: "no certificates: unchanged", in: "admin: {}\n# a comment\nstatic_resources: {listeners: []}\n"},
		{name: "listener pair and trusted CA", in: `
static_resources:
  listeners:
  - name: l
    filter_chains:
    - transport_socket:
        name: tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
          common_tls_context:
            tls_certificates:
            - certificate_chain: {filename: /etc/c.pem}
              private_key: {filename: /etc/k.pem}
            validation_context:
              trusted_ca: {filename: /etc/ca.pem}
`, secrets: 2,
			contains: []string{"tls_certificate_sds_secret_configs", "validation_context_sds_secret_config", `"name": "cert-c-`, `"sds_config": {"ads": {}, "resource_api_version": "V3"}`},
			absent:   []string{"filename", "tls_certificates"}},
		{name: "cluster with CA and other checks; node kept", in: `
node: {id: edge-1, cluster: ""}
static_resources:
  clusters:
  - name: c
    transport_socket:
      name: tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        commonTlsContext:
          validationContext:
            trustedCa: {filename: ca.pem}
            match_typed_subject_alt_names: [{san_type: DNS, matcher: {exact: x}}]
`, secrets: 1,
			// A static cluster's secret on a gRPC stream of its own, the
			// epoch named by the token (Envoy 1.40.0 crashed with a static
			// cluster's secret read over ADS).
			contains: []string{"combined_validation_context", "default_validation_context", "match_typed_subject_alt_names", `"id": "edge-1",`, `"cluster": ""`,
				`"api_config_source": {"api_type": "GRPC"`, `"cluster_name": "envoy-agent-xds", "authority": "envoy-agent-epoch"`},
			absent: []string{`"ads": {}`, `{"name": "envoy-agent-xds"`}},
		{name: "the operator's own ADS: a stream of their own, and the cluster", in: `
dynamic_resources:
  ads_config: {api_type: GRPC, grpc_services: [{envoy_grpc: {cluster_name: cp}}]}
static_resources:
  clusters:
  - {name: cp}
  - {name: envoy-agent-xds}
  listeners:
  - filter_chains:
    - transport_socket:
        typed_config:
          common_tls_context:
            tls_certificates:
            - certificate_chain: {filename: /etc/c.pem}
              private_key: {filename: /etc/k.pem}
`, secrets: 1,
			contains: []string{`"api_config_source": {"api_type": "GRPC"`, `"cluster_name": "envoy-agent-xds-2", "authority": "envoy-agent-epoch"`,
				`{"name": "envoy-agent-xds-2"`, `"path": "/run/agent/xds.sock"`},
			absent: []string{`"ads": {}`}},
		{name: "password: left as it is", in: `
static_resources:
  listeners:
  - filter_chains:
    - transport_socket:
        typed_config:
          common_tls_context:
            tls_certificates:
            - certificate_chain: {filename: /etc/c.pem}
              private_key: {filename: /etc/k.pem}
              password: {filename: /etc/p}
`, skipped: 1, contains: []string{"tls_certificates"}},
		{name: "same pair twice: one secret", in: `
static_resources:
  listeners:
  - filter_chains:
    - transport_socket:
        typed_config:
          common_tls_context: &ctx
            tls_certificates:
            - certificate_chain: {filename: /etc/c.pem}
              private_key: {filename: /etc/k.pem}
  - filter_chains:
    - transport_socket:
        typed_config:
          common_tls_context:
            tls_certificates:
            - certificate_chain: {filename: /etc/c.pem}
              private_key: {filename: /etc/k.pem}
`, secrets: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := certs.Rewrite([]byte(c.in), "envoy.yaml", run)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Secrets) != c.secrets || len(res.Skipped) != c.skipped {
				t.Fatalf("secrets %v, skipped %v", res.Secrets, res.Skipped)
			}
			out := string(res.Data)
			if c.secrets == 0 && out != c.in {
				t.Fatalf("changed with nothing to rewrite:\n%s", out)
			}
			for _, s := range c.contains {
				if !strings.Contains(out, s) {
					t.Errorf("output lacks %q:\n%s", s, out)
				}
			}
			for _, s := range c.absent {
				if strings.Contains(out, s) {
					t.Errorf("output holds %q:\n%s", s, out)
				}
			}
			var v any
			if err := yaml.Unmarshal(res.Data, &v); err != nil {
				t.Fatalf("output does not parse: %v", err)
			}
			// Rewriting the output again changes nothing.
			again, err := certs.Rewrite(res.Data, "envoy.yaml", run)
			if err != nil || string(again.Data) != out || len(again.Secrets) != 0 {
				t.Fatalf("second rewrite: %v, %d secrets", err, len(again.Secrets))
			}
			for _, s := range res.Secrets {
				if !filepath.IsAbs(s.CertFile) {
					t.Errorf("secret %+v", s)
				}
			}
		})
	}
}

func TestRewriteJSON(t *testing.T) {
	in := `{"static_resources":{"listeners":[{"filter_chains":[{"transport_socket":{"typed_config":{"common_tls_context":{"tls_certificates":[{"certificate_chain":{"filename":"/c.pem"},"private_key":{"filename":"/k.pem"}}]}}}}]}]}}`
	res, err := certs.Rewrite([]byte(in), "/etc/envoy.json", "/run/a")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Secrets) != 1 || !strings.HasPrefix(string(res.Data), "{") || !strings.Contains(string(res.Data), `"tls_certificate_sds_secret_configs"`) {
		t.Fatalf("%d secrets: %s", len(res.Secrets), res.Data)
	}
}

// A pair that is not whole refuses a first start, naming the file, with no
// key material in the error.
func TestRewriteBootstrapRefusesABadFirstPair(t *testing.T) {
	dir := t.TempDir()
	a, b := newPair(t, farFuture), newPair(t, farFuture)
	cases := []struct {
		name      string
		cert, key []byte
		file      string
	}{
		{"key of another certificate", a.cert, b.key, "k.pem"},
		{"empty certificate", nil, a.key, "c.pem"},
		{"not PEM", []byte("garbage\n"), a.key, "c.pem"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			writeFile(t, filepath.Join(dir, "c.pem"), c.cert)
			writeFile(t, filepath.Join(dir, "k.pem"), c.key)
			m, _, run := newManager(t, &logs{t: t})
			_, err := m.RewriteBootstrap(envoykit.TLSBootstrap(filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem"), 1, 2), "envoy.yaml", run)
			if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, c.file)) || strings.Contains(err.Error(), "BEGIN") {
				t.Fatalf("error %v, want one naming %s", err, c.file)
			}
		})
	}
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestExpiryWarnings(t *testing.T) {
	now := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name     string
		notAfter time.Time
		want     string // "" for no warning
	}{
		{"90 days left", now.Add(90 * 24 * time.Hour), ""},
		{"14 days left", now.Add(14 * 24 * time.Hour), ""},
		{"13 days left", now.Add(13*24*time.Hour + time.Hour), "expires on 2026-12-18T01:00:00Z, in 13 days"},
		{"expired", now.Add(-time.Hour), "expired on 2026-12-04T23:00:00Z"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := certs.ExpiryWarnings([]certs.Certificate{{File: "/c.pem", Subject: "CN=x", NotAfter: c.notAfter}}, now)
			switch {
			case c.want == "" && len(got) != 0:
				t.Fatalf("warned: %v", got)
			case c.want != "" && (len(got) != 1 || !strings.Contains(got[0], c.want) || !strings.Contains(got[0], "/c.pem")):
				t.Fatalf("got %v, want %q", got, c.want)
			}
		})
	}
}

// Inspect reads what the bootstrap names, and names the file it cannot.
func TestInspect(t *testing.T) {
	dir := t.TempDir()
	p := newPair(t, farFuture)
	writeFile(t, filepath.Join(dir, "c.pem"), p.cert)
	writeFile(t, filepath.Join(dir, "k.pem"), p.key)
	cs, err := certs.Inspect(envoykit.TLSBootstrap(filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem"), 1, 2), "envoy.yaml")
	if err != nil || len(cs) != 1 || cs[0].Serial != p.serial || cs[0].Subject != "CN=localhost,O=envoy-agent test" {
		t.Fatalf("%+v, %v", cs, err)
	}
	_, err = certs.Inspect(envoykit.TLSBootstrap(filepath.Join(dir, "c.pem"), filepath.Join(dir, "missing.pem"), 1, 2), "envoy.yaml")
	if err == nil || !strings.Contains(err.Error(), "missing.pem") {
		t.Fatalf("error %v, want one naming missing.pem", err)
	}
	if matches, _ := filepath.Glob(filepath.Join(os.TempDir(), "sds-*")); len(matches) != 0 {
		t.Fatalf("Inspect wrote %v", matches)
	}
}

// Certificates lists those of the latest bootstrap only; no key reaches the
// disk (the secrets are served over ADS, from memory).
func TestCertificatesFollowTheLatestBootstrap(t *testing.T) {
	dir := t.TempDir()
	var keys [][]byte
	for _, n := range []string{"a", "b"} {
		p := newPair(t, farFuture)
		writeFile(t, filepath.Join(dir, n+".pem"), p.cert)
		writeFile(t, filepath.Join(dir, n+".key"), p.key)
		keys = append(keys, p.key)
	}
	m, _, run := newManager(t, &logs{t: t})
	for _, n := range []string{"a", "b"} {
		if _, err := m.RewriteBootstrap(envoykit.TLSBootstrap(filepath.Join(dir, n+".pem"), filepath.Join(dir, n+".key"), 1, 2), "envoy.yaml", run); err != nil {
			t.Fatal(err)
		}
		cs := m.Certificates()
		if len(cs) != 1 || cs[0].File != filepath.Join(dir, n+".pem") {
			t.Fatalf("after the bootstrap of %s: %+v", n, cs)
		}
	}
	err := filepath.WalkDir(run, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(path)
		for _, k := range keys {
			if bytes.Contains(data, k[40:80]) {
				t.Errorf("%s holds a private key", path)
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
