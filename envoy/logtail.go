//go:build linux

package envoy

import (
	"bytes"
	"sync"
)

const (
	tailLines   = 20  // lines kept of Envoy's output for error reports
	tailLineMax = 512 // bytes kept of one line
)

// logTail is an io.Writer that keeps the last lines written to it.
type logTail struct {
	mu      sync.Mutex
	max     int
	lines   []string
	partial []byte
}

func newLogTail(max int) *logTail { return &logTail{max: max} }

func (t *logTail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			t.partial = appendCapped(t.partial, b)
			break
		}
		t.partial = appendCapped(t.partial, b[:i])
		t.push(string(t.partial))
		t.partial = t.partial[:0]
		b = b[i+1:]
	}
	return n, nil
}

func appendCapped(dst, src []byte) []byte {
	if room := tailLineMax - len(dst); room < len(src) {
		src = src[:max(room, 0)]
	}
	return append(dst, src...)
}

func (t *logTail) push(line string) {
	if len(t.lines) == t.max {
		copy(t.lines, t.lines[1:])
		t.lines = t.lines[:t.max-1]
	}
	t.lines = append(t.lines, line)
}

// Lines returns the kept lines, oldest first, with any unfinished last line.
func (t *logTail) Lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := append([]string(nil), t.lines...)
	if len(t.partial) > 0 {
		out = append(out, string(t.partial))
	}
	return out
}
