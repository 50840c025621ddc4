//go:build linux

package envoy

import (
	"strconv"
	"strings"
	"testing"
)

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

// lineRecorder records each Write it gets.
type lineRecorder struct{ writes []string }

func (r *lineRecorder) Write(b []byte) (int, error) {
	r.writes = append(r.writes, string(b))
	return len(b), nil
}

func TestLineWriterPassesWholeLines(t *testing.T) {
	long := strings.Repeat("x", maxRelayLine+10)
	tests := []struct {
		name   string
		chunks []string
		want   []string
	}{
		{"one line", []string{"a\n"}, []string{"a\n"}},
		{"a line in pieces", []string{"[info]", " hel", "lo\n"}, []string{"[info] hello\n"}},
		{"two lines in one write", []string{"a\nb\n"}, []string{"a\n", "b\n"}},
		{"a line across writes with another", []string{"a\nb", "c\nd"}, []string{"a\n", "bc\n", "d\n"}},
		{"an unfinished last line is flushed", []string{"tail"}, []string{"tail\n"}},
		{"a runaway line is cut", []string{long}, []string{long[:maxRelayLine] + "\n", long[maxRelayLine:] + "\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r lineRecorder
			w := newLineWriter(&r)
			for _, c := range tt.chunks {
				if n, err := w.Write([]byte(c)); n != len(c) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			w.Flush()
			if strings.Join(r.writes, "|") != strings.Join(tt.want, "|") {
				t.Errorf("writes %q, want %q", short(r.writes), short(tt.want))
			}
		})
	}
}

func short(s []string) []string {
	out := make([]string, len(s))
	for i, x := range s {
		if len(x) > 40 {
			x = x[:10] + "..." + x[len(x)-5:] + " (" + strconv.Itoa(len(x)) + " bytes)"
		}
		out[i] = x
	}
	return out
}
