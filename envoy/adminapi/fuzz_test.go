//go:build linux

package adminapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// FuzzParseActiveConnections: any text from /stats gives a count or an
// error naming the line. A count is never negative, and it is additive:
// appending one more listener gauge of k adds exactly k, appending the
// admin listener's or a worker's copy adds nothing.
func FuzzParseActiveConnections(f *testing.F) {
	f.Add([]byte("listener.127.0.0.1_10000.downstream_cx_active: 3\nlistener.admin.downstream_cx_active: 1\n"), uint16(2))
	f.Add([]byte("listener.x.worker_0.downstream_cx_active: 2\nhttp.ingress.downstream_cx_active: 9\n"), uint16(0))
	f.Add([]byte("listener.x.downstream_cx_active: 18446744073709551615\n"), uint16(1))
	f.Add([]byte("listener.x.downstream_cx_active 3"), uint16(5))
	f.Add([]byte(""), uint16(7))
	f.Fuzz(func(t *testing.T, body []byte, k uint16) {
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
		sep := []byte("\n")
		if len(body) == 0 || bytes.HasSuffix(body, sep) {
			sep = nil
		}
		more := fmt.Appendf(append(append([]byte{}, body...), sep...),
			"listener.fuzz_1.downstream_cx_active: %d\nlistener.admin.downstream_cx_active: 9\nlistener.fuzz_1.worker_0.downstream_cx_active: 9\n", k)
		m, err := ParseActiveConnections(more)
		if err != nil {
			t.Fatalf("%q parsed, but not with one more gauge: %v", body, err)
		}
		if m != n+int(k) {
			t.Fatalf("%q counts %d; with a gauge of %d more it counts %d", body, n, k, m)
		}
	})
}

// FuzzParseServerInfo: any answer of /server_info decodes or fails with an
// error that says what failed. Only valid JSON decodes, and what decodes
// is what encoding/json reads from it.
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
		if !json.Valid(body) {
			t.Fatalf("%q is not JSON, yet it decoded", body)
		}
		var want ServerInfo
		if err := json.Unmarshal(body, &want); err != nil || want != si {
			t.Fatalf("%q decoded to %+v; encoding/json reads %+v (%v)", body, si, want, err)
		}
	})
}
