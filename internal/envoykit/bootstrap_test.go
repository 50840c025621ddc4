package envoykit

import (
	"strings"
	"testing"
)

// Each listener's route carries its own x-config-version: ResponseHeader on
// the first, ExtraResponseHeader (when set) on the others.
func TestRenderBootstrapResponseHeaders(t *testing.T) {
	tests := []struct {
		name        string
		header      string
		extraHeader string
		want        []string // per listener, in order; "" for none
	}{
		{"none", "", "", []string{"", "", ""}},
		{"every listener", "v1", "", []string{"v1", "v1", "v1"}},
		{"the first listener only changes", "v2", "idle", []string{"v2", "idle", "idle"}},
		{"extra listeners only", "", "idle", []string{"", "idle", "idle"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := RenderBootstrap(BootstrapOptions{Ports: Ports{Admin: 1, Listener: 2, Upstream: 3}, ExtraListeners: []int{4, 5},
				ResponseHeader: tt.header, ExtraResponseHeader: tt.extraHeader})
			if err != nil {
				t.Fatal(err)
			}
			parts := strings.Split(string(b), "  - name: ingress")[1:]
			if len(parts) != len(tt.want) {
				t.Fatalf("%d listeners, want %d:\n%s", len(parts), len(tt.want), b)
			}
			for i, part := range parts {
				var got string
				if _, rest, ok := strings.Cut(part, `key: x-config-version, value: "`); ok {
					got, _, _ = strings.Cut(rest, `"`)
				}
				if got != tt.want[i] {
					t.Errorf("listener %d: x-config-version %q, want %q", i, got, tt.want[i])
				}
			}
		})
	}
}

// TestExampleBootstrap: written as Envoy's examples are, no listener and
// no node has a name, the admin is there or not, and a stats listener
// needs an admin to reach.
func TestExampleBootstrap(t *testing.T) {
	for _, tt := range []struct {
		name string
		o    ExampleOptions
		want []string
		not  []string
	}{
		{"no admin", ExampleOptions{Listener: 1, Upstream: 2}, []string{"port_value: 1 }", "port_value: 2 }"}, []string{"admin:", "name: ingress", "node:"}},
		{"TCP admin and stats", ExampleOptions{Listener: 1, Upstream: 2, Admin: "0.0.0.0:9901", StatsListener: 3},
			[]string{"socket_address: { address: 0.0.0.0, port_value: 9901 }", "route: { cluster: envoy-stats }", "socket_address: { address: 127.0.0.1, port_value: 9901 }"}, []string{"node:"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := ExampleBootstrap(tt.o)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tt.want {
				if !strings.Contains(string(b), s) {
					t.Errorf("no %q in\n%s", s, b)
				}
			}
			for _, s := range tt.not {
				if strings.Contains(string(b), s) {
					t.Errorf("%q in\n%s", s, b)
				}
			}
		})
	}
	if _, err := ExampleBootstrap(ExampleOptions{StatsListener: 3}); err == nil {
		t.Error("a stats listener without an admin rendered")
	}
}
