//go:build linux

package inplace

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy/xds/ads"
	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// secretsBase has a static secret for each case: srv.cert and upstream-ca
// are named by reference alone, from a listener and a cluster (the latter
// in JSON's camelCase); unused is named by nothing; web is also a
// listener's name; a:b has a character Envoy rewrites in stats (which
// mattered when secrets were confirmed from stats); sourced is named only
// with an sds_config of the operator's; odd has a field Envoy's Secret
// does not have, which the converter for ADS refuses.
const secretsBase = `admin: { address: { socket_address: { address: 127.0.0.1, port_value: 15000 } } }
static_resources:
  secrets:
  - { name: srv.cert, tls_certificate: { certificate_chain: { inline_string: CERT1 }, private_key: { inline_string: KEY1 } } }
  - { name: upstream-ca, validation_context: { trusted_ca: { inline_string: CA1 } } }
  - { name: unused, generic_secret: { secret: { inline_string: U1 } } }
  - { name: web, tls_certificate: { certificate_chain: { inline_string: CERTW } } }
  - { name: "a:b", tls_certificate: { certificate_chain: { inline_string: CERTAB } } }
  - { name: sourced, tls_certificate: { certificate_chain: { inline_string: CERTS } } }
  - { name: odd, tls_certificate: { certificate_chain: { inline_string: CERTO } }, no_such_field: 1 }
  listeners:
  - name: web
    address: { socket_address: { address: 127.0.0.1, port_value: 10000 } }
    filter_chains:
    - transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
          common_tls_context:
            tls_certificate_sds_secret_configs: [{ name: srv.cert }, { name: web }, { name: "a:b" }, { name: sourced, sds_config: { ads: {} } }, { name: odd }]
      filters: [{ name: envoy.filters.network.tcp_proxy, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: web, cluster: app } }]
  clusters:
  - name: app
    type: STATIC
    transport_socket: { name: envoy.transport_sockets.tls, typed_config: { "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext, commonTlsContext: { validationContextSdsSecretConfig: { name: upstream-ca } } } }
    load_assignment: { cluster_name: app, endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 9000 } } } }] }] }
`

func TestSecretsMoveOutOfStatic(t *testing.T) {
	b := parse(t, secretsBase)
	if got := strings.Join(b.Secrets(), ","); got != "srv.cert,upstream-ca,a:b" {
		t.Errorf("secrets moved: %s, want srv.cert,upstream-ca,a:b", got)
	}
	for _, name := range []string{"unused", "web", "sourced", "odd"} {
		if !strings.Contains(b.restText, `"name": "`+name+`"`) {
			t.Errorf("secret %s is not static in the bootstrap Envoy runs:\n%s", name, b.restText)
		}
	}
	if strings.Contains(b.restText, "srv.cert") || strings.Contains(b.restText, "upstream-ca") || strings.Contains(b.restText, "CERTAB") {
		t.Errorf("a moved secret is still in the bootstrap:\n%s", b.restText)
	}
	if inline := strings.Join(b.Inline(), "; "); !strings.Contains(inline, "secret odd stays static: ") || !strings.Contains(inline, "no_such_field") || strings.Contains(inline, "CERTO") {
		t.Errorf("Inline = %q; want why odd stays static, naming the field and not its content", inline)
	}
	served := b.Served(ads.SecretType)
	if len(served) != 3 || served[0].Name != "srv.cert" || served[2].Name != "a:b" || len(served[1].Body) == 0 {
		t.Errorf("secrets served: %v", served)
	}
	lds, err := b.ldsData("epoch-0-1")
	if err != nil {
		t.Fatal(err)
	}
	cds, err := b.cdsData("epoch-0-1")
	if err != nil {
		t.Fatal(err)
	}
	// Each reference to a moved secret reads it over ADS; the others stay
	// as they were (sourced's own ads source is the operator's).
	for _, c := range []struct {
		file string
		data []byte
		ads  int
	}{{"lds", lds, 3}, {"cds", cds, 1}} {
		if n := strings.Count(string(c.data), `"ads": {}`); n != c.ads {
			t.Errorf("%s has %d ADS sources, want %d:\n%s", c.file, n, c.ads, c.data)
		}
		if strings.Contains(string(c.data), "path_config_source") {
			t.Errorf("%s reads a file:\n%s", c.file, c.data)
		}
	}

	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"moved certificate", "KEY1", "KEY2", "secrets updated srv.cert"},
		{"moved CA", "CA1", "CA2", "secrets updated upstream-ca"},
		{"moved, any name", "CERTAB", "CERTAB2", "secrets updated a:b"},
		{"static, named by nothing", "U1", "U2", "restart"},
		{"static, named as a listener too", "CERTW", "CERTW2", "restart"},
		{"static, not convertible", "CERTO", "CERTO2", "restart"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Compare(b, parse(t, strings.Replace(secretsBase, tc.from, tc.to, 1)))
			var restart *RestartError
			switch {
			case tc.want == "restart" && !errors.As(err, &restart):
				t.Errorf("Compare = %q, %v; want a hot restart", c, err)
			case tc.want != "restart" && (err != nil || c.String() != tc.want):
				t.Errorf("Compare = %q, %v; want %q", c, err, tc.want)
			}
		})
	}
}

// Secrets move at any count: none is a watched file (before, only the
// first 32 did, and a change of any other was a hot restart).
func TestSecretsMoveAtAnyCount(t *testing.T) {
	const n = 1000
	doc := func(changed int) string {
		var s strings.Builder
		s.WriteString("static_resources:\n  secrets:\n")
		for i := range n {
			v := "x"
			if i == changed {
				v = "z" // not y: Envoy reads a plain y as a bool
			}
			fmt.Fprintf(&s, "  - { name: s%d, generic_secret: { secret: { inline_string: %s } } }\n", i, v)
		}
		s.WriteString("  listeners:\n  - name: l\n    address: { socket_address: { address: 127.0.0.1, port_value: 10000 } }\n    filter_chains:\n")
		for i := range n {
			fmt.Fprintf(&s, "    - { filter_chain_match: { server_names: [h%d] }, transport_socket: { name: tls, typed_config: { common_tls_context: { tls_certificate_sds_secret_configs: [{ name: s%d }] } } } }\n", i, i)
		}
		return s.String()
	}
	old := parse(t, doc(-1))
	if got := len(old.Secrets()); got != n {
		t.Fatalf("%d secrets moved, want %d", got, n)
	}
	if c, err := Compare(old, parse(t, doc(n-1))); err != nil || c.String() != fmt.Sprintf("secrets updated s%d", n-1) {
		t.Errorf("Compare = %q, %v; want the last secret updated", c, err)
	}
}

// TestSecretUpdatedInPlace: a static secret's new certificate reaches new
// handshakes of the same Envoy, with no listener updated or drained, and a
// TLS connection opened before goes on; a certificate with another's key,
// which Envoy rejects, leaves the previous one served and its file back.
func TestSecretUpdatedInPlace(t *testing.T) {
	pairs := make([][3]string, 3)
	for i := range pairs {
		c, k, serial, err := envoykit.ServingPair(time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		pairs[i] = [3]string{c, k, serial}
	}
	admin, port := envoykit.FreePort(t), envoykit.FreePort(t)
	v1 := envoykit.SecretTLSBootstrap(pairs[0][0], pairs[0][1], port, admin)
	run := runRewritten(t, "envoy.yaml", v1, admin)
	ctx := context.Background()
	if err := Accepted(ctx, run); err != nil {
		t.Fatalf("Accepted: %v", err)
	}
	if s, err := envoykit.TLSSerial(port); err != nil || s != pairs[0][2] {
		t.Fatalf("first certificate served: %s, %v; want %s", s, err, pairs[0][2])
	}
	conn, err := tls.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	open := &keepAlive{conn: conn, r: bufio.NewReader(conn)}
	if _, err := open.get(); err != nil {
		t.Fatalf("request on the open TLS connection: %v", err)
	}
	stats := func() string {
		body, err := httpAdmin(admin).Get(ctx, "/stats?filter="+`^listener_manager\.(lds\.update_attempt|total_listeners_draining|listener_in_place_updated|listener_modified)$`)
		if err != nil {
			t.Fatal(err)
		}
		return string(body)
	}
	listenersBefore := stats()

	cur := parse(t, string(v1))
	next := parse(t, string(envoykit.SecretTLSBootstrap(pairs[1][0], pairs[1][1], port, admin)))
	if c, err := compareAndApply(ctx, run, cur, next); err != nil || c.String() != "secrets updated srv" {
		t.Fatalf("Apply = %q, %v; want secrets updated srv", c, err)
	}
	if s, err := envoykit.TLSSerial(port); err != nil || s != pairs[1][2] {
		t.Errorf("after the update a new handshake sees %s, %v; want %s", s, err, pairs[1][2])
	}
	if _, closing, err := open.answer(); err != nil || closing {
		t.Errorf("the TLS connection opened before: closing %v, %v; want it answered and kept open", closing, err)
	}
	if after := stats(); after != listenersBefore {
		t.Errorf("the listeners changed with the secret:\nbefore %s\nafter %s", listenersBefore, after)
	}
	// The third certificate with the second's key: Envoy refuses it, and
	// says why in its NACK.
	bad := parse(t, string(envoykit.SecretTLSBootstrap(pairs[2][0], pairs[1][1], port, admin)))
	_, err = compareAndApply(ctx, run, next, bad)
	var rej *RejectedError
	if !errors.As(err, &rej) || !rej.Restored || !strings.Contains(err.Error(), "secret srv: ") || strings.Contains(err.Error(), "log says why") {
		t.Fatalf("Apply of a mismatched key = %v; want a *RejectedError naming the secret with Envoy's reason, restored", err)
	}
	t.Logf("refused: %v", err)
	if strings.Contains(err.Error(), "PRIVATE KEY") || strings.Contains(err.Error(), pairs[1][1][40:80]) {
		t.Errorf("the rejection quotes the key: %v", err)
	}
	if s, err := envoykit.TLSSerial(port); err != nil || s != pairs[1][2] {
		t.Errorf("after the rejection a new handshake sees %s, %v; want the previous %s", s, err, pairs[1][2])
	}
	if err := Accepted(ctx, run); err != nil {
		t.Errorf("Accepted after the put-back: %v", err)
	}
	if _, err := open.get(); err != nil {
		t.Errorf("the TLS connection opened first, after the rejection: %v", err)
	}
}

// A secret named from inside a connection manager's routes moves with
// them: the route configuration reads it over ADS, as the listener does.
func TestSecretNamedFromRoutes(t *testing.T) {
	b := parse(t, `static_resources:
  secrets:
  - { name: key, generic_secret: { secret: { inline_string: K } } }
  listeners:
  - name: web
    address: { socket_address: { address: 127.0.0.1, port_value: 10000 } }
    filter_chains: [{ filters: [{ name: hcm, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager, stat_prefix: web, route_config: { virtual_hosts: [{ name: all, domains: ["*"], typed_per_filter_config: { f: { "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.CommonTlsContext, validation_context_sds_secret_config: { name: key } } }, routes: [{ match: { prefix: "/" }, direct_response: { status: 200 } }] }] }, http_filters: [] } }] }]
`)
	if got := strings.Join(b.Secrets(), ","); got != "key" {
		t.Fatalf("secrets moved: %q, want key", got)
	}
	if len(b.routes) != 1 {
		t.Fatalf("%d route configurations moved, want 1", len(b.routes))
	}
	if text := yamlText(t, b.routes[0].node); !strings.Contains(text, "validation_context_sds_secret_config: {name: key, sds_config: {ads: {}, resource_api_version: V3}}") {
		t.Errorf("the route configuration does not read the secret over ADS:\n%s", text)
	}
}
