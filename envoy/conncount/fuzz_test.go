//go:build linux

package conncount

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// FuzzParseHexAddrPort: an address of /proc/net/tcp parses only as an IPv4
// or IPv6 address and a port, and formatting what it parsed back the
// kernel's way gives an address that parses to the same.
func FuzzParseHexAddrPort(f *testing.F) {
	for _, s := range []string{"0100007F:1F90", "00000000000000000000000001000000:0050", "0000000000000000FFFF00000100007F:1F90", "zz:1", "0100007F", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ap, err := parseHexAddrPort(s)
		if err != nil {
			return
		}
		b := ap.Addr().AsSlice()
		if ap.Addr().Is4() && len(strings.Split(s, ":")[0]) == 32 {
			b = netip.AddrFrom16(ap.Addr().As16()).AsSlice() // it was v4-mapped
		}
		for i := 0; i < len(b); i += 4 {
			b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
		}
		again, err := parseHexAddrPort(fmt.Sprintf("%X:%04X", b, ap.Port()))
		if err != nil || again != ap {
			t.Fatalf("%q parsed to %v; formatted back it parses to %v, %v", s, ap, again, err)
		}
	})
}
