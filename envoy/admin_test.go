//go:build linux

package envoy

import (
	"errors"
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

func TestCheckAdminAddress(t *testing.T) {
	tests := []struct {
		addr        string
		port        int32
		socket      string
		allowRemote bool
		wrongPort   bool
		notLocal    bool
		wrongKind   bool
		wrongSocket bool
	}{
		{addr: "127.0.0.1:15000", port: 15000},
		{addr: "[::1]:15000", port: 15000},
		{addr: "127.0.0.1:9901", port: 15000, wrongPort: true},
		{addr: "0.0.0.0:15000", port: 15000, notLocal: true},
		{addr: "0.0.0.0:15000", port: 15000, allowRemote: true},
		{addr: "10.0.0.1:9901", port: 15000, wrongPort: true, notLocal: true},
		{addr: "/run/envoy-agent/admin.sock", socket: "/run/envoy-agent/admin.sock"},
		{addr: "/run/envoy-agent/admin.sock", port: 15000, wrongKind: true},
		{addr: "127.0.0.1:15000", socket: "/run/envoy-agent/admin.sock", wrongKind: true},
		{addr: "/tmp/other.sock", socket: "/run/envoy-agent/admin.sock", wrongSocket: true},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			err := checkAdminAddress(tt.addr, ProxyConfig{AdminPort: tt.port, AdminSocket: tt.socket, AllowRemoteAdmin: tt.allowRemote})
			var ae *AdminAddressError
			if !tt.wrongPort && !tt.notLocal && !tt.wrongKind && !tt.wrongSocket {
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				return
			}
			if !errors.As(err, &ae) || ae.WrongPort != tt.wrongPort || ae.NotLocal != tt.notLocal || ae.WrongKind != tt.wrongKind {
				t.Fatalf("err = %#v, want WrongPort=%v NotLocal=%v WrongKind=%v", err, tt.wrongPort, tt.notLocal, tt.wrongKind)
			}
			if ae.Error() == "" {
				t.Fatal("empty message")
			}
		})
	}
}
