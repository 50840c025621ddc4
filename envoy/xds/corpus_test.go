package xds

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// routeCorpus are route configurations that exercise where Envoy's YAML
// loader and yaml.v3 with protojson could part: bools written y/Yes/on,
// octal and hexadecimal integers, 64-bit integers, floats (strings to
// Envoy), enums in lower case, durations, wrappers, Any and TypedStruct,
// Struct values of every scalar form, block scalars.
var routeCorpus = []string{`
name: r1
validate_clusters: yes
max_direct_response_body_size_bytes: 4096
virtual_hosts:
- name: v
  domains: ["*"]
  request_headers_to_add:
  - header: {key: x-a, value: "1"}
    append_action: overwrite_if_exists_or_add
  routes:
  - match: {prefix: "/", headers: [{name: x-h, string_match: {safe_regex: {regex: "^a.*"}}}]}
    route:
      cluster: c1
      timeout: 1.5s
      idle_timeout: 0.000000001s
      retry_policy: {retry_on: "5xx,reset", num_retries: 017, per_try_timeout: 0.25s}
      hash_policy: [{header: {header_name: x-user}, terminal: on}]
    typed_per_filter_config:
      envoy.filters.http.lua:
        "@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.LuaPerRoute
        disabled: true
  - match: {path: "/r"}
    redirect: {response_code: found, https_redirect: Yes}
  - match: {safe_regex: {regex: "/w/.*"}}
    route:
      weighted_clusters:
        clusters: [{name: c1, weight: 0x10}, {name: c2, weight: 16}]
  - match: {prefix: "/d"}
    direct_response: {status: 0310, body: {inline_string: "yes"}}
metadata:
  filter_metadata:
    m:
      a: 1.5
      b: 1e3
      c: 08
      d: 017
      e: 0x10
      f: yes
      g: .inf
      h: 5000000000
      i: -.inf
      j: +5
      k: 1.
      l: .5
      m: 0o17
      n: 1_000
      o: -0x10
      p: 0x
      q: 1e
      r: 0b11
      s: 9223372036854775808
      t: .nan
      u: Yes
      v: yEs
      w: ~
      x: null
      y: ""
      z:
      aa: 00
      ab: -0
      ac: 1E3
      ad: 0.0
      ae: +.inf
      af: 12e-1
      ag: 0X1F
      ah: 9223372036854775807
      ai: [1, "2", y, n, NO, off, On, TRUE]
      aj: {"017": 017, '0x1': 'yes'}
      ak: 2147483647
      al: 2147483648
      am: -2147483648
      an: -2147483649
      ao: |
        multi
        017
      ap: >-
        folded
        yes
      aq: 'single ''quoted'''
      ar: "\u00e9\t\"x\""
      as: -9223372036854775808
      at: 0x7fffffffffffffff
      au: 0x8000000000000000
      av: -017
`, `
name: r2
virtual_hosts:
- name: v
  domains: [a.test, "*.b.test"]
  include_request_attempt_count: y
  retry_policy: {retry_on: connect-failure, retry_back_off: {base_interval: 0.01s, max_interval: 1s}}
  routes:
  - match: {prefix: "/", case_sensitive: off, query_parameters: [{name: q, string_match: {exact: "Yes", ignore_case: on}}]}
    route: {cluster: c2, timeout: 0s, prefix_rewrite: "/x", host_rewrite_literal: "017"}
    typed_per_filter_config:
      envoy.filters.http.lua:
        "@type": type.googleapis.com/xds.type.v3.TypedStruct
        type_url: type.googleapis.com/envoy.extensions.filters.http.lua.v3.LuaPerRoute
        value: {disabled: yes}
      envoy.filters.http.cors:
        "@type": type.googleapis.com/envoy.extensions.filters.http.cors.v3.CorsPolicy
        allow_origin_string_match: [{prefix: "https://"}]
        allow_credentials: TRUE
        max_age: "600"
  - match: {prefix: "/m"}
    route:
      cluster: c1
      request_mirror_policies: [{cluster: c2, runtime_fraction: {default_value: {numerator: 50, denominator: ten_thousand}}}]
    response_headers_to_add: [{header: {key: x-b, value: "on"}, append_action: add_if_absent}]
    decorator: {operation: "op", propagate: n}
  virtual_clusters: [{name: vc, headers: [{name: ":method", string_match: {exact: GET}}]}]
response_headers_to_remove: [x-c]
most_specific_header_mutations_wins: True
`}

// secretCorpus are secrets: certificates inline as strings (a block
// scalar) and as bytes, a validation context with lower-case enums and
// bools in every spelling, session ticket keys.
func secretCorpus(t *testing.T) []string {
	cert, key, _ := pair(t, "a.test")
	cert2, key2, _ := pair(t, "b.test")
	ticket := make([]byte, 80)
	if _, err := rand.Read(ticket); err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString
	return []string{
		"name: s1\ntls_certificate:\n  certificate_chain:\n    inline_string: |\n" + indent(cert, 6) + "\n  private_key:\n    inline_string: |\n" + indent(key, 6) + "\n",
		fmt.Sprintf("name: s2\ntls_certificate: {certificate_chain: {inline_bytes: %s}, private_key: {inline_bytes: %s}}\n", b64([]byte(cert2)), b64([]byte(key2))),
		fmt.Sprintf("name: s3\nvalidation_context:\n  trusted_ca: {inline_string: %q}\n  trust_chain_verification: accept_untrusted\n  only_verify_leaf_cert_crl: off\n  match_typed_subject_alt_names: [{san_type: dns, matcher: {exact: a.test, ignore_case: yes}}]\n", cert),
		fmt.Sprintf("name: s4\nsession_ticket_keys: {keys: [{inline_bytes: %s}]}\n", b64(ticket)),
	}
}

// corpusBootstrap is a bootstrap serving every route configuration of the
// corpus on a listener of its own and the secrets on two TLS filter
// chains: inline and static when ads is nil, over ADS otherwise.
func corpusBootstrap(t *testing.T, routes, secrets []string, s *Server) string {
	var l strings.Builder
	ports, err := envoykit.FreePorts(len(routes) + 1)
	if err != nil {
		t.Fatal(err)
	}
	router := `http_filters: [{name: envoy.filters.http.router, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}]`
	for i, r := range routes {
		name := strings.TrimSpace(strings.SplitN(strings.SplitN(r, "name: ", 2)[1], "\n", 2)[0])
		rds := "route_config:\n" + indent(r, 14)
		if s != nil {
			rds = fmt.Sprintf("rds: {route_config_name: %s, config_source: {ads: {}, resource_api_version: V3}}", name)
		}
		fmt.Fprintf(&l, `  - name: l%d
    address: {socket_address: {address: 127.0.0.1, port_value: %d}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: l%d
          %s
          %s
`, i, ports[i], i, router, rds)
	}
	ref := func(name string) string {
		if s != nil {
			return fmt.Sprintf("{name: %s, sds_config: {ads: {}, resource_api_version: V3}}", name)
		}
		return "{name: " + name + "}"
	}
	tls := func(sni, body string) string {
		return fmt.Sprintf(`    - filter_chain_match: {server_names: [%s]}
      transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
%s
      filters: [{name: d, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.network.direct_response.v3.Config, response: {inline_string: %s}}}]
`, sni, body, sni)
	}
	fmt.Fprintf(&l, `  - name: tls
    address: {socket_address: {address: 127.0.0.1, port_value: %d}}
    listener_filters: [{name: envoy.filters.listener.tls_inspector, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector}}]
    filter_chains:
`, ports[len(routes)])
	l.WriteString(tls("a.test", fmt.Sprintf("          session_ticket_keys_sds_secret_config: %s\n          common_tls_context: {tls_certificate_sds_secret_configs: [%s], validation_context_sds_secret_config: %s}", ref("s4"), ref("s1"), ref("s3"))))
	l.WriteString(tls("b.test", fmt.Sprintf("          common_tls_context: {tls_certificate_sds_secret_configs: [%s]}", ref("s2"))))
	clusters := ""
	for _, c := range []string{"c1", "c2"} {
		clusters += fmt.Sprintf("  - {name: %s, type: STATIC, load_assignment: {cluster_name: %s, endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 9}}}}]}]}}\n", c, c)
	}
	if s != nil {
		return adsBootstrap(t, s, "corpus", clusters, l.String())
	}
	var sec strings.Builder
	for _, x := range secrets {
		sec.WriteString("  - " + strings.ReplaceAll(strings.TrimRight(x, "\n"), "\n", "\n    ") + "\n")
	}
	return "static_resources:\n  clusters:\n" + clusters + "  secrets:\n" + sec.String() + "  listeners:\n" + l.String()
}

// byName indexes a config_dump?resource= answer (one entry per resource)
// by the name of each entry's inner object.
func byName(dump map[string]any, inner string) map[string]any {
	out := map[string]any{}
	for _, c := range dump["configs"].([]any) {
		if v, ok := c.(map[string]any)[inner].(map[string]any); ok {
			out[v["name"].(string)] = v
		}
	}
	return out
}

// TestConvertMatchesEnvoy serves the corpus to a real Envoy twice: inline in
// a static bootstrap, which Envoy's YAML loader reads, and over ADS,
// converted by Convert. What Envoy's config_dump shows of each route
// configuration and secret must be the same.
func TestConvertMatchesEnvoy(t *testing.T) {
	if envoykit.UnitTier() {
		t.Skip("runs Envoy")
	}
	secrets := secretCorpus(t)
	static, _ := startEnvoy(t, corpusBootstrap(t, routeCorpus, secrets, nil), envoykit.BaseID())
	wantRoutes := byName(static.configDump(t, "static_route_configs"), "route_config")
	wantSecrets := byName(static.configDump(t, "static_secrets"), "secret")
	static.Kill()

	s := listen(t, testLog{t})
	var routes, secs []Resource
	for _, y := range routeCorpus {
		r, err := ConvertYAML(RouteType, []byte(y))
		if err != nil {
			t.Fatal(err)
		}
		routes = append(routes, r)
	}
	for _, y := range secrets {
		r, err := ConvertYAML(SecretType, []byte(y))
		if err != nil {
			t.Fatal(err)
		}
		secs = append(secs, r)
	}
	if err := s.Set("corpus", RouteType, routes); err != nil {
		t.Fatal(err)
	}
	if err := s.Set("corpus", SecretType, secs); err != nil {
		t.Fatal(err)
	}
	ads, _ := startEnvoy(t, corpusBootstrap(t, routeCorpus, secrets, s), envoykit.BaseID())
	gotRoutes := byName(ads.configDump(t, "dynamic_route_configs"), "route_config")
	gotSecrets := byName(ads.configDump(t, "dynamic_active_secrets"), "secret")
	for _, c := range []struct {
		what      string
		want, got map[string]any
		n         int
	}{{"route configuration", wantRoutes, gotRoutes, len(routeCorpus)}, {"secret", wantSecrets, gotSecrets, len(secrets)}} {
		if len(c.want) != c.n || len(c.got) != c.n {
			t.Fatalf("%ss: static shows %d, ADS %d, want %d", c.what, len(c.want), len(c.got), c.n)
		}
		for name, want := range c.want {
			if !reflect.DeepEqual(want, c.got[name]) {
				w, _ := json.MarshalIndent(want, "", " ")
				g, _ := json.MarshalIndent(c.got[name], "", " ")
				t.Errorf("%s %s: static bootstrap:\n%s\nover ADS:\n%s", c.what, name, w, g)
			}
		}
	}
}
