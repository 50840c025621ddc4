package inplace

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// unnamed is a listener without a name on address, whose connection
// manager answers status.
func unnamed(address string, status int) string {
	return fmt.Sprintf(`  - address: %s
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress_http
          route_config:
            virtual_hosts: [{ name: all, domains: ["*"], routes: [{ match: { prefix: "/" }, direct_response: { status: %d } }] }]
          http_filters: [{ name: envoy.filters.http.router, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router } }]
`, address, status)
}

func TestUnnamedListenersAreNamedByAddress(t *testing.T) {
	tcp := func(host string, port int) string {
		return fmt.Sprintf("{ socket_address: { address: %q, port_value: %d } }", host, port)
	}
	for _, tt := range []struct {
		name      string
		listeners []string
		want      []string // the listeners' names, in order
	}{
		{"IPv4", []string{unnamed(tcp("0.0.0.0", 10000), 200)}, []string{"0.0.0.0_10000"}},
		{"IPv6", []string{unnamed(tcp("::1", 443), 200)}, []string{"[__1]_443"}},
		{"UDP beside TCP on one port", []string{
			unnamed(tcp("0.0.0.0", 443), 200),
			unnamed(`{ socket_address: { protocol: UDP, address: 0.0.0.0, port_value: 443 } }`, 200),
		}, []string{"0.0.0.0_443", "0.0.0.0_443_udp"}},
		{"unix socket", []string{unnamed(`{ pipe: { path: /run/app.sock } }`, 200)}, []string{"pipe__run_app.sock"}},
		{"one address twice: by place", []string{unnamed(tcp("127.0.0.1", 1), 200), unnamed(tcp("127.0.0.1", 1), 201)}, []string{"127.0.0.1_1-0", "127.0.0.1_1-1"}},
		{"no address: by place", []string{unnamed("{}", 200)}, []string{"listener-0"}},
		{"an operator's listener has the name", []string{"  - name: 127.0.0.1_1\n    address: " + tcp("127.0.0.2", 2) + "\n", unnamed(tcp("127.0.0.1", 1), 200)}, []string{"127.0.0.1_1", "127.0.0.1_1-1"}},
		{"named ones kept", []string{"  - name: web\n    address: " + tcp("127.0.0.1", 1) + "\n", unnamed(tcp("127.0.0.1", 2), 200)}, []string{"web", "127.0.0.1_2"}},
		{"empty name", []string{"  - name: \"\"\n    address: " + tcp("127.0.0.1", 3) + "\n"}, []string{"127.0.0.1_3"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := parse(t, "static_resources:\n  listeners:\n"+strings.Join(tt.listeners, ""))
			if got := b.Listeners(); !slices.Equal(got, tt.want) {
				t.Errorf("listeners %q, want %q", got, tt.want)
			}
			for _, n := range b.Named() {
				if !slices.Contains(tt.want, n.Name) || n.Name != tt.want[n.Index] {
					t.Errorf("Named %v, not listener %d's name", n, n.Index)
				}
			}
		})
	}
}

// TestUnnamedListenersReloadAsRoutes: a route edit of an unnamed listener
// is a route update (its routes are named after the listener's name), an
// edit that keeps its address keeps its name, and moving it is a listener
// removed and one added.
func TestUnnamedListenersReloadAsRoutes(t *testing.T) {
	doc := func(port, status int) string {
		return "static_resources:\n  listeners:\n" + unnamed(fmt.Sprintf("{ socket_address: { address: 0.0.0.0, port_value: %d } }", port), status)
	}
	old := parse(t, doc(10000, 200))
	if got := old.Routes(); !slices.Equal(got, []string{"0.0.0.0_10000/0/0"}) {
		t.Fatalf("routes %q", got)
	}
	for _, tt := range []struct {
		name, text, want string
	}{
		{"route edit", doc(10000, 503), "routes updated 0.0.0.0_10000/0/0"},
		{"same", doc(10000, 200), "nothing changed"},
		{"moved", doc(10001, 200), "listeners added 0.0.0.0_10001; listeners removed 0.0.0.0_10000; routes added 0.0.0.0_10001/0/0; routes removed 0.0.0.0_10000/0/0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Compare(old, parse(t, tt.text))
			if err != nil || c.String() != tt.want {
				t.Errorf("Compare = %q, %v; want %q", c, err, tt.want)
			}
		})
	}
}
