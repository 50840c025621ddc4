//go:build linux

// Package printable makes text that comes from a file or from Envoy safe
// to print or log: a terminal never receives a control character from it,
// so a certificate's subject, a path or Envoy's reason cannot set a window
// title, move the cursor, erase a line or forge one.
package printable

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// String returns s with each character a terminal would act on instead of
// show written as a Go escape: the control characters (C0 with tab and
// newline, DEL, C1; "\x1b" for ESC), the format characters that reorder or
// hide text (bidirectional overrides, zero-width characters: "\u202e"),
// and each byte that is not UTF-8 ("\xff"). Anything else is kept as is;
// s is returned unchanged when it has none of them.
func String(s string) string {
	if clean(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x100 && unsafe(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafe(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// Strings is String of each of ss, in a new slice.
func Strings(ss []string) []string {
	if ss == nil {
		return nil
	}
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = String(s)
	}
	return out
}

func clean(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f || c >= 0x80 {
			return cleanSlow(s)
		}
	}
	return true
}

func cleanSlow(s string) bool {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || unsafe(r) {
			return false
		}
		i += n
	}
	return true
}

func unsafe(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029'
}
