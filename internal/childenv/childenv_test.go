package childenv

import (
	"slices"
	"testing"
)

func TestClean(t *testing.T) {
	tests := []struct {
		name  string
		env   []string
		extra []string
		want  []string
	}{
		{"keeps the rest", []string{"PATH=/bin", "HOME=/root"}, nil, []string{"PATH=/bin", "HOME=/root"}},
		{"drops every service-only variable", []string{"NOTIFY_SOCKET=/run/x", "WATCHDOG_USEC=1", "WATCHDOG_PID=2", "LISTEN_FDS=1", "LISTEN_PID=3", "LISTEN_FDNAMES=a", "A=b"}, nil, []string{"A=b"}},
		{"a longer name is not a match", []string{"NOTIFY_SOCKET_X=1", "LISTEN_FDS2=1"}, nil, []string{"NOTIFY_SOCKET_X=1", "LISTEN_FDS2=1"}},
		{"extra comes last", []string{"A=1", "NOTIFY_SOCKET=x"}, []string{"NOTIFY_SOCKET=/mine"}, []string{"A=1", "NOTIFY_SOCKET=/mine"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Clean(tt.env, tt.extra...); !slices.Equal(got, tt.want) {
				t.Fatalf("Clean(%q, %q) = %q, want %q", tt.env, tt.extra, got, tt.want)
			}
		})
	}
}
