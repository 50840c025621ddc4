//go:build linux

package output

import (
	"strings"
	"sync"
)

const (
	tailLines   = 20  // lines kept of Envoy's stderr for error reports
	tailLineMax = 512 // bytes kept of one line
)

// tail keeps the last lines of Envoy's stderr, each cut to tailLineMax.
type tail struct {
	mu    sync.Mutex
	max   int
	lines []string
}

func (t *tail) add(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == t.max {
		copy(t.lines, t.lines[1:])
		t.lines = t.lines[:t.max-1]
	}
	t.lines = append(t.lines, strings.Clone(line[:min(len(line), tailLineMax)]))
}

// Lines returns the kept lines, oldest first.
func (t *tail) Lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.lines...)
}
