//go:build linux

package adminapi

import (
	"strings"
	"testing"
)

func TestParseActiveConnections(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		want    int
		wantErr string
	}{
		{name: "empty", body: "", want: 0},
		{name: "sums listeners, skips admin, workers and internal listeners", body: `listener.127.0.0.1_10000.downstream_cx_active: 3
listener.127.0.0.1_10000.worker_0.downstream_cx_active: 3
listener.0.0.0.0_8443.downstream_cx_active: 2
listener.admin.downstream_cx_active: 1
listener.admin.main_thread.downstream_cx_active: 1
listener.envoy_internal_x.downstream_cx_active: 5
http.ingress.downstream_cx_active: 9
`, want: 5},
		{name: "not a stats line", body: "listener.x.downstream_cx_active 3\n", wantErr: "line 1"},
		{name: "not a number", body: "listener.x.downstream_cx_active: many\n", wantErr: "not a connection count"},
		{name: "negative", body: "listener.x.downstream_cx_active: -1\n", wantErr: "not a connection count"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseActiveConnections([]byte(tt.body))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}

func TestParseServerInfo(t *testing.T) {
	si, err := ParseServerInfo([]byte(`{"version":"abc/1.40.0/Clean/RELEASE/BoringSSL","state":"LIVE","hot_restart_version":"11.104",
		"command_line_options":{"base_id":"7","restart_epoch":2,"config_path":"/e.yaml"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if si.State != "LIVE" || si.HotRestartVersion != "11.104" || si.CommandLineOptions.RestartEpoch != 2 || si.CommandLineOptions.BaseID != "7" {
		t.Fatalf("got %+v", si)
	}
	if _, err := ParseServerInfo([]byte("{")); err == nil {
		t.Fatal("no error for truncated JSON")
	}
}
