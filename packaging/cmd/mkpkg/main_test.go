package main

import "testing"

func TestNormalizeVersion(t *testing.T) {
	for in, want := range map[string]string{
		"v1.2.3":                  "1.2.3",
		"1.2.3":                   "1.2.3",
		"v1.2.3-dirty":            "1.2.3+dirty",
		"v1.2.3-4-gabc1234":       "1.2.3+4.gabc1234",
		"v1.2.3-rc1-4-gabc1234":   "1.2.3-rc1+4.gabc1234",
		"v1.2.3-4-gabc1234-dirty": "1.2.3+4.gabc1234.dirty",
		"abc1234":                 "0.0.0+git.abc1234",
		"abc1234-dirty":           "0.0.0+git.abc1234.dirty",
		"g0394358":                "0.0.0+git.0394358",
		"g0394358-dirty":          "0.0.0+git.0394358.dirty",
		"gabc1234":                "0.0.0+git.abc1234",
		"0.0.0":                   "0.0.0",
		"20240101":                "20240101",
		" v2.0.0\n":               "2.0.0",
	} {
		got, err := normalizeVersion(in)
		if err != nil || got != want {
			t.Errorf("normalizeVersion(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "main", "release-x"} {
		if got, err := normalizeVersion(bad); err == nil {
			t.Errorf("normalizeVersion(%q) = %q, want an error", bad, got)
		}
	}
}
