//go:build linux

package output

import "testing"

func TestLogLevel(t *testing.T) {
	tests := []struct{ line, want string }{
		{"[2026-12-03 09:09:55.560][27019][warning][main] [source/server/server.cc:1059] There is no configured limit", "warning"},
		{"[2026-12-03 09:09:55.511][27019][info][main] [source/server/server.cc:463] initializing epoch 0", "info"},
		{"[2026-12-03 09:09:55.511][1][critical][main] [source/server/server.cc:1] error initializing configuration", "critical"},
		{"[2026-12-03 09:09:55.511][1][error][upstream] [x.cc:1] x", "error"},
		{"[2026-12-03 09:09:55.511][1][debug][misc] [x.cc:1] x", "debug"},
		{`{"level":"error","time":"2026-12-03T09:00:00.000000Z","scope":"main","msg":"x"}`, "error"},
		{`{"level":"warning","time":"x"}`, "warning"},
		{"  static_resources {", ""},
		{"}", ""},
		{"[2026-12-03 09:09:55.511][1][bogus][main] x", ""},
		{"[unterminated", ""},
		{`{"level":"info`, ""},
		{"", ""},
	}
	for _, tt := range tests {
		if got := LogLevel([]byte(tt.line)); got != tt.want {
			t.Errorf("LogLevel(%q) = %q, want %q", tt.line, got, tt.want)
		}
	}
}
