//go:build linux

package service

import "testing"

func TestEnvoyRelease(t *testing.T) {
	tests := []struct{ in, want string }{
		{"\n.cache/envoy/1.40.0/envoy  version: 9e5580933739775e8bce696a57a2e1bc99368f23/1.40.0/Clean/RELEASE/BoringSSL\n\n", "1.40.0"},
		{"9e5580933739775e8bce696a57a2e1bc99368f23/1.39.3/Clean/RELEASE/BoringSSL", "1.39.3"},
		{"something else", "something else"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := envoyRelease(tt.in); got != tt.want {
			t.Errorf("envoyRelease(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
