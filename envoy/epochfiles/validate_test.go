//go:build linux

package epochfiles

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/envoy/xds"
	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// validateSite is a bootstrap of many listeners, a few clusters and a
// static secret: what a reload in place validates a part of.
type validateSite struct {
	certA, keyA, keyB string // a pair, and another pair's key
	unchanged         int    // plain listeners no edit touches
}

// text renders the bootstrap; edit changes it as one reload's edit would.
func (s validateSite) text(edit func(*strings.Builder, string) string) string {
	ind := func(pem string) string { return strings.ReplaceAll(strings.TrimSpace(pem), "\n", "\n          ") }
	var b strings.Builder
	fmt.Fprintf(&b, `node: { id: node1, cluster: n1 }
static_resources:
  secrets:
  - name: srv
    tls_certificate:
      certificate_chain:
        inline_string: |
          %s
      private_key:
        inline_string: |
          %s
  clusters:
  - { name: c0, type: STATIC, connect_timeout: 1s, load_assignment: { cluster_name: c0, endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 1 } } } }] }] } }
  - { name: c1, type: STATIC, connect_timeout: 1s, load_assignment: { cluster_name: c1, endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 2 } } } }] }] } }
  listeners:
  - name: tls
    address: { socket_address: { address: 127.0.0.1, port_value: 11000 } }
    filter_chains:
    - transport_socket: { name: tls, typed_config: { "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext, common_tls_context: { tls_certificate_sds_secret_configs: [{ name: srv }] } } }
      filters: [{ name: d, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.network.direct_response.v3.Config, response: { inline_string: tls } } }]
`, ind(s.certA), ind(s.keyA))
	for i := range 2 + s.unchanged {
		cluster := "c0"
		if i == 1 {
			cluster = "c1"
		}
		fmt.Fprintf(&b, `  - name: web%d
    address: { socket_address: { address: 127.0.0.1, port_value: %d } }
    filter_chains: [{ filters: [{ name: hcm, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager, stat_prefix: web%d, codec_type: AUTO, route_config: { virtual_hosts: [{ name: all, domains: ["*"], routes: [{ match: { prefix: "/" }, route: { cluster: %s } }] }] }, http_filters: [{ name: router, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router } }] } }] }]
`, i, 12000+i, i, cluster)
	}
	text := b.String()
	if edit != nil {
		text = edit(&b, text)
	}
	return text
}

// envoyValidate runs Envoy's --mode validate on path: nil, or Envoy's
// reason.
func envoyValidate(t *testing.T, path string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, envoykit.Binary(t), "--mode", "validate", "-c", path, "--disable-hot-restart", "-l", "warning").CombinedOutput()
	if err == nil {
		return nil
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "[critical]") {
			return errors.New(l[strings.LastIndex(l, "] ")+2:])
		}
	}
	return fmt.Errorf("%v: %s", err, out)
}

// decodeRewrite is a copy's rewrite that changes nothing and hands the
// tree it decoded on, as the agent's does.
func decodeRewrite(data []byte, name, _ string) ([]byte, *yaml.Node, error) {
	var doc yaml.Node
	if err := bootyaml.Decode(data, &doc); err != nil {
		return data, nil, nil
	}
	return data, &doc, nil
}

// TestPlanValidatesWhatChanges: a reload in place has Envoy validate only
// what its change touches, with everything that names it and everything
// it names (inplace.Subset), and still refuses, with Envoy's reason, every
// edit that Envoy's validation of the whole new bootstrap refuses: each
// case below is refused by the whole file's --mode validate (checked
// first), and by the plan's. A valid route edit of one listener of many
// validates that listener alone.
func TestPlanValidatesWhatChanges(t *testing.T) {
	certA, keyA, _, err := envoykit.ServingPair(time.Now().Add(24 * time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	_, keyB, _, err := envoykit.ServingPair(time.Now().Add(24 * time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	site := validateSite{certA: certA, keyA: keyA, keyB: keyB, unchanged: 30}
	replace := func(old, new string) func(*strings.Builder, string) string {
		return func(_ *strings.Builder, text string) string {
			if !strings.Contains(text, old) {
				t.Fatalf("the edit's text %q is not in the bootstrap", old)
			}
			return strings.Replace(text, old, new, 1)
		}
	}
	appendText := func(more string) func(*strings.Builder, string) string {
		return func(_ *strings.Builder, text string) string { return text + more }
	}
	const web0Route = "routes: [{ match: { prefix: \"/\" }, route: { cluster: c0 } }] }] }, http_filters"
	for _, tc := range []struct {
		name     string
		edit     func(*strings.Builder, string) string
		inPlace  bool   // the plan is one in place (else the reload validates the whole copy)
		why      string // in Envoy's reason, both ways ("" for a valid edit)
		validate int    // listeners in what the plan validates, for a valid edit
	}{
		{name: "a valid route edit of one listener", edit: replace(web0Route, strings.Replace(web0Route, "prefix: \"/\"", "prefix: \"/v2\"", 1)),
			inPlace: true, validate: 1},
		{name: "a route to an unknown cluster", edit: replace(web0Route, strings.Replace(web0Route, "cluster: c0", "cluster: nowhere", 1)),
			inPlace: true, why: "unknown cluster 'nowhere'"},
		{name: "a removed cluster an unchanged listener's route still names", edit: replace("  - { name: c1, type: STATIC", "  - { name: c1-gone, type: STATIC"),
			inPlace: true, why: "unknown cluster 'c1'"},
		{name: "a bad regex", edit: replace(web0Route, strings.Replace(web0Route, "prefix: \"/\"", "safe_regex: { regex: \"((\" }", 1)),
			inPlace: true, why: "missing )"},
		{name: "an invalid filter config in a changed listener", edit: replace("stat_prefix: web0, codec_type: AUTO", "stat_prefix: web0, codec_type: NOPE"),
			inPlace: true, why: "NOPE"},
		{name: "a changed secret whose key does not match its certificate, named only by an unchanged listener", edit: replace(strings.ReplaceAll(strings.TrimSpace(keyA), "\n", "\n          "), strings.ReplaceAll(strings.TrimSpace(keyB), "\n", "\n          ")),
			inPlace: true, why: "KEY_VALUES_MISMATCH"},
		{name: "a cluster with a bad field", edit: replace("  - { name: c0, type: STATIC, connect_timeout: 1s,", "  - { name: c0, type: STATIC, connect_timeout: 1s, lb_policy: NOPE,"),
			inPlace: true, why: "NOPE"},
		{name: "a changed cluster with a bad endpoint", edit: replace("socket_address: { address: 127.0.0.1, port_value: 1 }", "socket_address: { address: not-an-address, port_value: 1 }"),
			inPlace: true, why: "not-an-address"},
		{name: "an added listener at an unchanged listener's address", edit: appendText(`  - name: again
    address: { socket_address: { port_value: 12005, address: "127.0.0.1" } }
    filter_chains: [{ filters: [{ name: d, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.network.direct_response.v3.Config, response: { inline_string: x } } }] }]
`), inPlace: true, why: "duplicate address"},
		{name: "an added listener naming a secret that does not exist", edit: appendText(`  - name: tls2
    address: { socket_address: { address: 127.0.0.1, port_value: 11001 } }
    filter_chains:
    - transport_socket: { name: tls, typed_config: { "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext, common_tls_context: { tls_certificate_sds_secret_configs: [{ name: missing }] } } }
      filters: [{ name: d, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.network.direct_response.v3.Config, response: { inline_string: tls } } }]
`), inPlace: true, why: "missing"},
		// Envoy 1.40.0's validation takes two static listeners of one
		// name; the agent does not split such a bootstrap (LDS keys
		// listeners by name): the reload validates the whole copy and
		// hot-restarts, as before.
		{name: "a duplicate listener name", edit: appendText(`  - name: web3
    address: { socket_address: { address: 127.0.0.1, port_value: 13000 } }
    filter_chains: [{ filters: [{ name: d, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.network.direct_response.v3.Config, response: { inline_string: x } } }] }]
`), inPlace: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := t.TempDir()
			srv, err := xds.Listen(run, quiet{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(srv.Close)
			src := filepath.Join(t.TempDir(), "envoy.yaml")
			if err := os.WriteFile(src, []byte(site.text(nil)), 0o600); err != nil {
				t.Fatal(err)
			}
			var c Copier
			serving, err := c.Copy(run, src, src, 0, decodeRewrite)
			if err != nil {
				t.Fatal(err)
			}
			if err := envoyValidate(t, serving.Path); err != nil {
				t.Fatalf("the serving bootstrap: %v", err)
			}
			f, _, why := ForEpoch(serving, src, true, srv)
			if why != nil || f.Resources == "" {
				t.Fatalf("ForEpoch: %v", why)
			}
			defer f.Remove()

			if err := os.WriteFile(src, []byte(site.text(tc.edit)), 0o600); err != nil {
				t.Fatal(err)
			}
			next, err := c.Checked(run, src, 0, decodeRewrite)
			if err != nil {
				t.Fatal(err)
			}
			defer os.Remove(next.Path)
			whole := envoyValidate(t, next.Path)
			if tc.why != "" && (whole == nil || !strings.Contains(whole.Error(), tc.why)) {
				t.Fatalf("the whole file's validation: %v, want a refusal with %q (the case's premise)", whole, tc.why)
			}
			plan, err := f.Plan(next, src)
			if (err == nil) != tc.inPlace {
				t.Fatalf("Plan: %v, want in place %v", err, tc.inPlace)
			}
			if !tc.inPlace {
				t.Logf("not in place (%v): the reload validates the whole copy: %v", err, whole)
				return
			}
			validated := 0
			got := plan.Validate(func(path string) error {
				var doc yaml.Node
				if err := bootyaml.ReadFile(path, &doc); err != nil {
					t.Fatal(err)
				}
				validated = len(bootyaml.Items(bootyaml.Value(bootyaml.Value(bootyaml.Root(&doc), "static_resources"), "listeners")))
				return envoyValidate(t, path)
			})
			t.Logf("%s: whole: %v; the plan's (%d of %d listeners): %v", plan.Change, whole, validated, 3+site.unchanged, got)
			switch {
			case tc.why == "" && got != nil:
				t.Fatalf("the plan's validation refused a valid edit: %v", got)
			case tc.why == "" && validated != tc.validate:
				t.Fatalf("the plan validated %d listeners, want %d", validated, tc.validate)
			case tc.why != "" && (got == nil || !strings.Contains(got.Error(), tc.why)):
				t.Fatalf("the plan's validation: %v, want Envoy's refusal with %q, as the whole file's: %v", got, tc.why, whole)
			}
			if leftovers, _ := filepath.Glob(filepath.Join(run, "*-check-*")); len(leftovers) > 0 {
				t.Errorf("the bootstrap validated is left behind: %v", leftovers)
			}
		})
	}
}
