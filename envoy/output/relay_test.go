//go:build linux

package output

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
)

// lineRecorder records each Write it gets.
type lineRecorder struct{ writes []string }

func (r *lineRecorder) Write(b []byte) (int, error) {
	r.writes = append(r.writes, string(b))
	return len(b), nil
}

// TestRelayPassesWholeLines: stdout goes on a whole line per Write, whatever
// pieces Envoy wrote it in.
func TestRelayPassesWholeLines(t *testing.T) {
	long := strings.Repeat("x", maxLine+10)
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
		{"a runaway line is cut", []string{long}, []string{long[:maxLine] + "\n", long[maxLine:] + "\n"}},
		{"a line of exactly maxLine is one line", []string{long[:maxLine] + "\n", "b\n"}, []string{long[:maxLine] + "\n", "b\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r lineRecorder
			rel := NewRelay(&r, io.Discard)
			w := rel.Stdout()
			for _, c := range tt.chunks {
				if n, err := w.Write([]byte(c)); n != len(c) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			rel.Flush()
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

// TestRelayKeepsLastLines: the last tailLines lines of stderr are kept, an
// unfinished last one included once flushed, each cut to tailLineMax.
func TestRelayKeepsLastLines(t *testing.T) {
	rel := NewRelay(io.Discard, io.Discard)
	for i := range tailLines + 5 {
		if _, err := fmt.Fprintf(rel.Stderr(), "line %d\n", i); err != nil {
			t.Fatal(err)
		}
	}
	_, _ = io.WriteString(rel.Stderr(), strings.Repeat("x", 2*tailLineMax)+"\nunfin")
	_, _ = io.WriteString(rel.Stderr(), "ished")
	rel.Flush()
	got := rel.LastLines()
	if len(got) != tailLines {
		t.Fatalf("kept %d lines, want %d: %q", len(got), tailLines, got)
	}
	if got[0] != "line 7" || got[tailLines-1] != "unfinished" {
		t.Errorf("kept %q ... %q, want line 7 ... unfinished", got[0], got[tailLines-1])
	}
	if l := len(got[tailLines-2]); l != tailLineMax {
		t.Errorf("a long line kept %d bytes, want %d", l, tailLineMax)
	}
}
