//go:build linux

package envoy

import (
	"bytes"
	"io"
	"sync"
)

// maxRelayLine is the longest line relayed in one piece; a longer one is passed on in parts of
// this size, so one runaway line cannot grow the buffer without bound.
const maxRelayLine = 64 << 10

// lineWriter passes what one Envoy process writes on to dst one whole line per Write, so that the
// lines of two epochs sharing dst never interleave mid-line, and dst can read each line's level.
type lineWriter struct {
	mu  sync.Mutex
	dst io.Writer
	buf []byte
}

func newLineWriter(dst io.Writer) *lineWriter { return &lineWriter{dst: dst} }

func (w *lineWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			w.buf = append(w.buf, b...)
			for len(w.buf) >= maxRelayLine {
				rest := append([]byte(nil), w.buf[maxRelayLine:]...)
				w.emit(append(w.buf[:maxRelayLine], '\n'))
				w.buf = append(w.buf, rest...)
			}
			break
		}
		w.buf = append(w.buf, b[:i+1]...)
		w.emit(w.buf)
		b = b[i+1:]
	}
	return n, nil
}

// Flush passes on an unfinished last line, ended by a newline.
func (w *lineWriter) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.emit(append(w.buf, '\n'))
	}
}

// emit writes one line to dst. An error of dst is dropped: Envoy must not be stopped (its pipe
// must keep draining) because the agent's own output failed.
func (w *lineWriter) emit(line []byte) {
	_, _ = w.dst.Write(line)
	w.buf = w.buf[:0]
}
