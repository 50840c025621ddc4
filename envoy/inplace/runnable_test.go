package inplace

import (
	"strings"
	"testing"

	"github.com/envoy-agent/envoy-agent/envoy/xds/ads"
)

// Runnable wires a copy that reads from the agent to the epoch's server,
// and leaves one that reads nothing from it as it is.
func TestRunnable(t *testing.T) {
	wire := Wire{Socket: "/run/x/xds.sock", Epoch: "epoch-3-7"}
	listenerSecret := `static_resources:
  listeners:
  - filter_chains: [{ transport_socket: { typed_config: { common_tls_context: { tls_certificate_sds_secret_configs: [{ name: c, sds_config: { ads: {}, resource_api_version: V3 } }] } } } }]
`
	clusterSecret := `static_resources:
  clusters:
  - name: envoy-agent-xds
  - name: back
    transport_socket: { typed_config: { common_tls_context: { validation_context_sds_secret_config: { name: ca, sds_config: { api_config_source: { api_type: GRPC, grpc_services: [{ envoy_grpc: { cluster_name: envoy-agent-xds-2, authority: ` + ads.EpochToken + ` } }] } } } } } }
`
	ownADS := "dynamic_resources:\n  ads_config: { api_type: GRPC, grpc_services: [{ envoy_grpc: { cluster_name: cp } }] }\n"
	const authority = `"authority": "epoch-3-7"`
	for _, tt := range []struct {
		name, in string
		run      bool     // wired (else run as it is)
		contains []string // in what runs
		absent   []string
		streams  int // sources with the epoch's authority: the agent's ADS and each stream of its own
	}{
		{"nothing from the agent", "static_resources: { listeners: [] }\n", false, nil, nil, 0},
		{"the operator's own ADS alone", ownADS + listenerSecret, false, nil, nil, 0},
		{"a listener's secret over ADS", listenerSecret, true,
			[]string{`"name": "envoy-agent-xds"`, `"path": "/run/x/xds.sock"`, `"ads_config": {`, `"api_type": "GRPC"`}, nil, 1},
		{"a cluster's secret on a stream of its own", clusterSecret, true,
			[]string{`{"name": "envoy-agent-xds-2", "type": "STATIC"`, `"ads_config": {`}, []string{ads.EpochToken}, 2},
		{"beside the operator's own ADS", ownADS + clusterSecret, true,
			[]string{`"cluster_name": "cp"`}, []string{ads.EpochToken}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, err := Runnable([]byte(tt.in), "envoy.yaml", wire)
			if err != nil || (out != nil) != tt.run {
				t.Fatalf("Runnable = %q, %v; want wired %v", out, err, tt.run)
			}
			for _, s := range tt.contains {
				if !strings.Contains(string(out), s) {
					t.Errorf("what runs lacks %q:\n%s", s, out)
				}
			}
			for _, s := range tt.absent {
				if strings.Contains(string(out), s) {
					t.Errorf("what runs holds %q:\n%s", s, out)
				}
			}
			if n := strings.Count(string(out), authority); n != tt.streams {
				t.Errorf("what runs has %d sources with the epoch's authority, want %d:\n%s", n, tt.streams, out)
			}
		})
	}
	if out, err := Runnable([]byte(listenerSecret), "envoy.pb", wire); out != nil || err != nil {
		t.Errorf("a .pb bootstrap: %q, %v; want it run as it is", out, err)
	}
}
