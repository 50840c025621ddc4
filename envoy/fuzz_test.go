package envoy

import (
	"strings"
	"testing"
)

// FuzzParseActiveConnections: any text from /stats gives a count or an
// error naming the line, never a panic or a negative count.
func FuzzParseActiveConnections(f *testing.F) {
	f.Add([]byte("listener.127.0.0.1_10000.downstream_cx_active: 3\nlistener.admin.downstream_cx_active: 1\n"))
	f.Add([]byte("listener.x.worker_0.downstream_cx_active: 2\nhttp.ingress.downstream_cx_active: 9\n"))
	f.Add([]byte("listener.x.downstream_cx_active: 18446744073709551615\n"))
	f.Add([]byte("listener.x.downstream_cx_active 3"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, body []byte) {
		n, err := ParseActiveConnections(body)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "stats line ") {
				t.Fatalf("error %q does not name the line", err)
			}
			return
		}
		if n < 0 {
			t.Fatalf("negative count %d", n)
		}
	})
}

// FuzzParseServerInfo: any answer of /server_info decodes or fails with an
// error, never a panic.
func FuzzParseServerInfo(f *testing.F) {
	f.Add([]byte(`{"version":"x/1.40.0","state":"LIVE","hot_restart_version":"11.104","command_line_options":{"base_id":"0","restart_epoch":1}}`))
	f.Add([]byte(`{"command_line_options":{"restart_epoch":"one"}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		si, err := ParseServerInfo(body)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "decode /server_info") {
				t.Fatalf("error %q lacks context", err)
			}
			return
		}
		_ = si.State
	})
}

// FuzzCheckAdminAddress: whatever Envoy writes to --admin-address-path is
// accepted or refused with an error, never a panic.
func FuzzCheckAdminAddress(f *testing.F) {
	for _, s := range []string{"127.0.0.1:15000", "[::1]:15000", "0.0.0.0:15000", "garbage", ":", "[::1]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		_ = checkAdminAddress(addr, ProxyConfig{AdminPort: 15000})
		_ = checkAdminAddress(addr, ProxyConfig{AdminSocket: "/run/envoy-agent/admin.sock"})
	})
}
