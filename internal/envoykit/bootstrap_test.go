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
