//go:build linux

package printable

import "testing"

func TestString(t *testing.T) {
	tests := []struct{ in, want string }{
		{"CN=example.com, O=Example", "CN=example.com, O=Example"},
		{"caf\u00e9 \u65e5\u672c", "caf\u00e9 \u65e5\u672c"},
		{"x\x1b]0;forged title\x07", `x\x1b]0;forged title\x07`},
		{"\r\x1b[2K\x1b[32mOK\x1b[0m", `\x0d\x1b[2K\x1b[32mOK\x1b[0m`},
		{"a\n\x1b[1A", `a\x0a\x1b[1A`},
		{"tab\there", `tab\x09here`},
		{"del\x7f c1\u009b", `del\x7f c1\x9b`},
		{"bidi \u202egnp.exe", `bidi \u202egnp.exe`},
		{"zero\u200bwidth", `zero\u200bwidth`},
		{"bad \xff utf8", `bad \xff utf8`},
	}
	for _, tt := range tests {
		if got := String(tt.in); got != tt.want {
			t.Errorf("String(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
