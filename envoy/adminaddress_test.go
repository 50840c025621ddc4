//go:build linux

package envoy

import (
	"errors"
	"net"
	"net/netip"
	"testing"
)

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

// FuzzCheckAdminAddress: whatever Envoy writes to --admin-address-path is
// accepted only when it is a loopback IP with port 15000, and refused
// otherwise, never a panic.
func FuzzCheckAdminAddress(f *testing.F) {
	for _, s := range []string{"127.0.0.1:15000", "[::1]:15000", "0.0.0.0:15000", "garbage", ":", "[::1]", "127.0.0.1:015000"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		_ = checkAdminAddress(addr, ProxyConfig{AdminSocket: "/run/envoy-agent/admin.sock"})
		err := checkAdminAddress(addr, ProxyConfig{AdminPort: 15000})
		host, port, serr := net.SplitHostPort(addr)
		ip, perr := netip.ParseAddr(host)
		acceptable := serr == nil && port == "15000" && perr == nil && ip.IsLoopback()
		if (err == nil) != acceptable {
			t.Fatalf("checkAdminAddress(%q) = %v; want accepted: %v", addr, err, acceptable)
		}
	})
}
