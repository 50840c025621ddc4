package inplace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/envoy/xds"
	"github.com/envoy-agent/envoy-agent/envoy/xds/ads"
	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
)

// base is a bootstrap with two listeners, two clusters and a stats sink
// that names a third cluster.
const base = `# the operator's comment
node: { id: n1, cluster: c1 }
admin:
  address: { socket_address: { address: 127.0.0.1, port_value: 15000 } }
stats_sinks:
- name: envoy.stat_sinks.statsd
  typed_config:
    "@type": type.googleapis.com/envoy.config.metrics.v3.StatsdSink
    tcp_cluster_name: statsd
static_resources:
  listeners:
  - name: web
    address: { socket_address: { address: 127.0.0.1, port_value: 10000 } }
    filter_chains: [{ filters: [{ name: envoy.filters.network.tcp_proxy, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: web, cluster: app } }] }]
  - name: other
    address: { socket_address: { address: 127.0.0.1, port_value: 10001 } }
    filter_chains: [{ filters: [{ name: envoy.filters.network.tcp_proxy, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: other, cluster: app } }] }]
  clusters:
  - name: app
    type: STATIC
    load_assignment: { cluster_name: app, endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 9000 } } } }] }] }
  - name: statsd
    type: STATIC
    load_assignment: { cluster_name: statsd, endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 8125 } } } }] }] }
  - name: authz
    type: STATIC
    load_assignment: { cluster_name: authz, endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 9001 } } } }] }] }
`

// parse parses a bootstrap as the agent does, its route configurations
// and secrets converted for ADS.
func parse(t testing.TB, text string) *Bootstrap {
	t.Helper()
	b, err := Parse("envoy.yaml", []byte(text), xds.Convert)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return b
}

func TestParseSplitsListenersAndClusters(t *testing.T) {
	b := parse(t, base)
	if got := strings.Join(b.Listeners(), ","); got != "web,other" {
		t.Errorf("listeners %s, want web,other", got)
	}
	if got := strings.Join(b.Clusters(), ","); got != "app,authz" {
		t.Errorf("dynamic clusters %s, want app,authz", got)
	}
	if got := strings.Join(b.Kept(), ","); got != "statsd" {
		t.Errorf("kept clusters %s, want statsd (the stats sink's)", got)
	}
	run, err := b.bootstrapData("/run/x/epoch-0-1-envoy.yaml.d", Wire{Socket: "/run/x/xds.sock", Epoch: "epoch-0-1"})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := yaml.Unmarshal(run, &got); err != nil {
		t.Fatalf("bootstrapData bootstrap: %v\n%s", err, run)
	}
	sr := got["static_resources"].(map[string]any)
	if _, ok := sr["listeners"]; ok {
		t.Errorf("the bootstrapData bootstrap still has static listeners:\n%s", run)
	}
	if cl := sr["clusters"].([]any); len(cl) != 2 || cl[0].(map[string]any)["name"] != "statsd" || cl[1].(map[string]any)["name"] != ads.ClusterName {
		t.Errorf("static clusters %v, want statsd and the agent's xDS cluster", cl)
	}
	dr := got["dynamic_resources"].(map[string]any)
	if p := dr["lds_config"].(map[string]any)["path_config_source"].(map[string]any)["path"]; p != "/run/x/epoch-0-1-envoy.yaml.d/lds.yaml" {
		t.Errorf("lds path %v", p)
	}
	grpc := dr["ads_config"].(map[string]any)["grpc_services"].([]any)[0].(map[string]any)["envoy_grpc"].(map[string]any)
	if grpc["cluster_name"] != ads.ClusterName || grpc["authority"] != "epoch-0-1" {
		t.Errorf("ads_config's gRPC service %v, want the xDS cluster with the epoch as its authority", grpc)
	}
	if strings.Contains(string(run), "operator's comment") {
		t.Errorf("comments are kept:\n%s", run)
	}
	lds, err := b.ldsData("epoch-0-1")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Version   string           `yaml:"version_info"`
		Resources []map[string]any `yaml:"resources"`
	}
	if err := yaml.Unmarshal(lds, &file); err != nil {
		t.Fatal(err)
	}
	if file.Version == "" || len(file.Resources) != 2 || file.Resources[0]["@type"] != listenerType || file.Resources[1]["name"] != "other" {
		t.Errorf("lds file:\n%s", lds)
	}
}

func TestParseRefuses(t *testing.T) {
	for _, tt := range []struct {
		name, file, text, reason string
	}{
		{"dynamic", "e.yaml", "dynamic_resources: {}\n", "dynamic_resources"},
		{"proto", "e.pb", "x", "YAML or JSON"},
		{"anchors", "e.yaml", "a: &x {b: 1}\nc: *x\n", "anchors"},
		{"unnamed cluster", "e.yaml", "static_resources: { clusters: [ { type: STATIC } ] }\n", "clusters[0] has no name"},
		{"twice", "e.yaml", "static_resources: { clusters: [ { name: a }, { name: a } ] }\n", "two named"},
		{"not a mapping", "e.yaml", "[1]\n", "not a mapping"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.file, []byte(tt.text), xds.Convert)
			var nr *NotRewritableError
			if !errors.As(err, &nr) || !strings.Contains(nr.Reason, tt.reason) {
				t.Errorf("Parse = %v, want a NotRewritableError saying %q", err, tt.reason)
			}
		})
	}
}

// TestWrittenComparesEqual: a bootstrap read back from the text the agent
// writes of it (bootyaml.Encode) compares equal to the one it was written
// from: what a dry run, or an agent adopting an Envoy, compares.
func TestWrittenComparesEqual(t *testing.T) {
	for name, text := range map[string]string{"base": base, "secrets": secretsBase} {
		var doc yaml.Node
		if err := bootyaml.Decode([]byte(text), &doc); err != nil {
			t.Fatal(err)
		}
		written, err := bootyaml.Encode(&doc, "envoy.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if c, err := Compare(parse(t, text), parse(t, string(written))); err != nil || !c.Empty() {
			t.Errorf("%s: Compare = %q, %v; want nothing changed:\n%s", name, c, err, written)
		}
	}
}

func TestCompare(t *testing.T) {
	for _, tt := range []struct {
		name, from, to string
		want           string // Change.String, or the RestartError's reason
		restart        bool
	}{
		{"nothing", "port_value: 9000", "port_value: 9000", "nothing changed", false},
		{"comment only", "# the operator's comment", "# another comment", "nothing changed", false},
		{"cluster updated", "port_value: 9000", "port_value: 9100", "clusters updated app", false},
		{"listener updated", "stat_prefix: web", "stat_prefix: web2", "listeners updated web", false},
		{"listener removed", "  - name: other\n", "  - name: gone\n", "listeners added gone; listeners removed other", false},
		{"admin", "port_value: 15000", "port_value: 15001", "admin changed", true},
		{"node", "id: n1", "id: n2", "node changed", true},
		{"quoted, as Envoy reads it too", "stat_prefix: web", `stat_prefix: "web"`, "nothing changed", false},
		{"in octal, as Envoy reads it too", "port_value: 9000", "port_value: 021450", "nothing changed", false},
		{"read otherwise", "stat_prefix: web", "stat_prefix: 9000", "listeners updated web", false},
		{"kept cluster", "port_value: 8125", "port_value: 8126", "static_resources changed (clusters named outside the listeners and clusters stay static: statsd)", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			to := strings.Replace(base, tt.from, tt.to, 1)
			if to == base && tt.from != tt.to {
				t.Fatalf("%q is not in the bootstrap", tt.from)
			}
			c, err := Compare(parse(t, base), parse(t, to))
			var re *RestartError
			switch {
			case tt.restart && (!errors.As(err, &re) || re.Reason != tt.want):
				t.Errorf("Compare = %v, %v; want a hot restart: %s", c, err, tt.want)
			case !tt.restart && (err != nil || c.String() != tt.want):
				t.Errorf("Compare = %q, %v; want %q", c, err, tt.want)
			}
		})
	}
}

func TestAddedAndRemovedCluster(t *testing.T) {
	to := strings.Replace(base, "name: authz", "name: authz2", 1)
	to = strings.Replace(to, "cluster_name: authz", "cluster_name: authz2", 1)
	c, err := Compare(parse(t, base), parse(t, to))
	if err != nil || c.String() != "clusters added authz2; clusters removed authz" {
		t.Errorf("Compare = %q, %v", c, err)
	}
}

func TestSourceClustersStayStatic(t *testing.T) {
	text := strings.Replace(base, "stat_prefix: web,", "stat_prefix: web, access_log: [{ name: als, typed_config: { common_config: { grpc_service: { envoy_grpc: { cluster_name: authz } } } } }],", 1)
	b := parse(t, text)
	if got := strings.Join(b.Kept(), ","); got != "statsd,authz" {
		t.Errorf("kept %s, want statsd,authz (authz is a gRPC service's cluster_name)", got)
	}
}

// fakeDump is a stand-in for Envoy's admin answering /config_dump with a
// refused listener whose details quote secrets (a real Envoy's text for
// such a case is not at hand).
type fakeDump string

func (f fakeDump) Get(_ context.Context, path string) ([]byte, error) {
	if strings.HasPrefix(path, "/config_dump?resource=dynamic_listeners") {
		return []byte(f), nil
	}
	return []byte(`{"configs":[]}`), nil
}

func TestRejectionLeavesSecretsOut(t *testing.T) {
	for _, tt := range []struct{ name, details, want string }{
		{"proto dump", "Proto constraint validation failed (ListenerValidationError.Address: value is required):\nname: \"web\"\nfilter_chains {\n  inline_string: \"SECRETKEY\"\n}\n-----BEGIN PRIVATE KEY-----\nMIIsecret\n-----END PRIVATE KEY-----",
			"listener web: Proto constraint validation failed (ListenerValidationError.Address: value is required):"},
		{"one line", `Proto constraint validation failed (X): name: "web" inline_string: "SECRETKEY"`, "listener web: Proto constraint validation failed (X): <configuration left out>"},
		{"pem", "Failed to load private key -----BEGIN PRIVATE KEY-----MIIsecret", "listener web: Failed to load private key <PEM block left out>"},
		{"bind", "cannot bind '127.0.0.1:80': Address already in use", "listener web: cannot bind '127.0.0.1:80': Address already in use"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dump, err := json.Marshal(map[string]any{"configs": []any{map[string]any{"name": "web", "error_state": map[string]any{
				"details": tt.details, "last_update_attempt": time.Now().UTC().Format(time.RFC3339Nano)}}}})
			if err != nil {
				t.Fatal(err)
			}
			reason, ok := rejection(context.Background(), fakeDump(dump), lds, time.Now())
			if !ok || reason != tt.want {
				t.Errorf("rejection = %q, %v; want %q", reason, ok, tt.want)
			}
		})
	}
}

// hcm is a listener whose connection manager has inline routes.
const hcm = `static_resources:
  listeners:
  - name: web
    address: { socket_address: { address: 127.0.0.1, port_value: 10000 } }
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: web
          route_config:
            name: operators_name
            virtual_hosts: [{ name: all, domains: ["*"], routes: [{ match: { prefix: "/" }, direct_response: { status: 200 } }] }]
          http_filters: [{ name: envoy.filters.http.router, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router } }]
    default_filter_chain:
      filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: fallback
          route_config: { virtual_hosts: [{ name: all, domains: ["*"], routes: [{ match: { prefix: "/" }, direct_response: { status: 404 } }] }] }
          http_filters: [{ name: envoy.filters.http.router, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router } }]
`

// The routes of each connection manager become a route configuration of
// their own, named after the listener, chain and filter, read over ADS
// with its clusters checked (validate_clusters, unless the operator set
// it); a change of them alone is a route update, a change beside them a
// listener update; a route configuration that cannot be converted for ADS
// stays inline, and the bootstrap says why.
func TestRoutesMoveOutOfListeners(t *testing.T) {
	for _, tt := range []struct {
		name, from, to string
		routes         string // the route configurations of the new bootstrap
		want           string // Change.String
	}{
		{"nothing", "status: 200", "status: 200", "web/0/0,web/default/0", "nothing changed"},
		{"route", "status: 200", "status: 201", "web/0/0,web/default/0", "routes updated web/0/0"},
		{"default chain's route", "status: 404", "status: 403", "web/0/0,web/default/0", "routes updated web/default/0"},
		{"operator's route name", "name: operators_name", "name: other_name", "web/0/0,web/default/0", "nothing changed"},
		{"beside the routes", "stat_prefix: web", "stat_prefix: web2", "web/0/0,web/default/0", "listeners updated web"},
		{"any stat prefix", "stat_prefix: web", "stat_prefix: \"web:1\"", "web/0/0,web/default/0", "listeners updated web"},
		{"not convertible", "name: operators_name", "name: operators_name\n            no_such_field: 1", "web/default/0", "listeners updated web; routes removed web/0/0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			to := strings.Replace(hcm, tt.from, tt.to, 1)
			old, b := parse(t, hcm), parse(t, to)
			if got := strings.Join(b.Routes(), ","); got != tt.routes {
				t.Errorf("routes %s, want %s", got, tt.routes)
			}
			c, err := Compare(old, b)
			if err != nil || c.String() != tt.want {
				t.Errorf("Compare = %q, %v; want %q", c, err, tt.want)
			}
			lds, err := b.ldsData("epoch-0-1")
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(lds), "route_config_name"); n != len(b.Routes()) {
				t.Errorf("%d RDS sources in the listener file, want %d:\n%s", n, len(b.Routes()), lds)
			}
			if n := strings.Count(string(lds), `"config_source": {"ads": {}, "resource_api_version": "V3"}`); n != len(b.Routes()) {
				t.Errorf("%d RDS sources read over ADS, want %d:\n%s", n, len(b.Routes()), lds)
			}
			served := b.Served(ads.RouteType)
			if len(served) != len(b.Routes()) {
				t.Fatalf("%d route configurations served, want %d", len(served), len(b.Routes()))
			}
			for i, r := range served {
				if r.Name != b.Routes()[i] || len(r.Body) == 0 {
					t.Errorf("served %q (%d bytes), want %s converted", r.Name, len(r.Body), b.Routes()[i])
				}
			}
			if inline := strings.Join(b.Inline(), "; "); (tt.name == "not convertible") != strings.Contains(inline, "the routes of listener web (route configuration web/0/0) stay in the listener: ") ||
				(tt.name == "not convertible") != strings.Contains(inline, "no_such_field") {
				t.Errorf("Inline = %q", inline)
			}
		})
	}
}

// A route configuration read over RDS gets validate_clusters true, as a
// static one has it by default, unless the operator set it: over RDS it
// defaults to false, and Envoy would take a route to a cluster that does
// not exist, which the static bootstrap refuses.
func TestRoutesValidateTheirClusters(t *testing.T) {
	for _, tt := range []struct{ set, want string }{
		{"", "validate_clusters: true"},
		{"validate_clusters: false\n            ", "validate_clusters: false"},
		{"validateClusters: false\n            ", "validateClusters: false"},
	} {
		b := parse(t, strings.Replace(hcm, "name: operators_name", tt.set+"name: operators_name", 1))
		r := b.routes[0]
		text := yamlText(t, r.node)
		if strings.Count(text, "alidate") != 1 || !strings.Contains(text, tt.want) {
			t.Errorf("with %q the route configuration is\n%s\nwant %s once", tt.set, text, tt.want)
		}
	}
}

// yamlText is a node's YAML.
func yamlText(t testing.TB, n *yaml.Node) string {
	t.Helper()
	b, err := yaml.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// manyListeners is a bootstrap of n HTTP listeners l0 to l(n-1), each with
// its routes inline; listener edit answers status.
func manyListeners(n, edit, status int) string {
	var b strings.Builder
	b.WriteString("static_resources:\n  listeners:\n")
	for i := range n {
		s := 200
		if i == edit {
			s = status
		}
		fmt.Fprintf(&b, `  - name: l%d
    address: { socket_address: { address: 127.0.0.1, port_value: %d } }
    filter_chains: [{ filters: [{ name: hcm, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager, stat_prefix: l%d, route_config: { virtual_hosts: [{ name: all, domains: ["*"], routes: [{ match: { prefix: "/" }, direct_response: { status: %d } }] }] }, http_filters: [{ name: envoy.filters.http.router, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router } }] } }] }]
`, i, 10000+i, i, s)
	}
	return b.String()
}

// Every connection manager's routes move, at any count: no file is watched
// for them, so a route edit of the last of 1,000 listeners is a route
// update, as of the first (before, only the first 32 got a route file).
func TestRoutesMoveAtAnyCount(t *testing.T) {
	const n = 1000
	old := parse(t, manyListeners(n, -1, 200))
	if got := len(old.Routes()); got != n {
		t.Fatalf("%d route configurations moved, want %d", got, n)
	}
	for _, edit := range []int{0, n / 2, n - 1} {
		c, err := Compare(old, parse(t, manyListeners(n, edit, 201)))
		if want := fmt.Sprintf("routes updated l%d/0/0", edit); err != nil || c.String() != want {
			t.Errorf("Compare = %q, %v; want %q", c, err, want)
		}
	}
}
