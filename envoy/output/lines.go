//go:build linux

package output

import (
	"bytes"
	"sync"
)

// maxLine bounds one line of Envoy's output the agent handles in one piece:
// a longer one is handed on in parts of this size, so that one runaway line
// cannot grow a buffer without bound. Stdout relays every part as a line of
// its own; stderr keeps the first part only (the rest could hold a
// configuration dump that Redact would not see the start of).
const maxLine = 16 << 10

// lineSplitter is the io.Writer that cuts what Envoy writes into lines: it
// hands emit each whole line, ended by a newline (an unfinished last line
// gets one at Flush), and a line longer than maxLine in parts of maxLine
// bytes, each ended by a newline, the second and later with cont set. emit runs under the
// splitter's lock, one line at a time, and must not keep line; end, if set,
// runs after Flush handed on the last line.
type lineSplitter struct {
	mu   sync.Mutex
	buf  []byte
	cont bool // the line under way already had a part handed on
	emit func(line []byte, cont bool)
	end  func()
}

// Write never fails: losing the destination must not block or stop Envoy
// (its pipe must keep draining).
func (s *lineSplitter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		chunk := b
		if i >= 0 {
			chunk = b[:i]
		}
		for len(s.buf)+len(chunk) >= maxLine {
			take := maxLine - len(s.buf)
			s.buf = append(s.buf, chunk[:take]...)
			chunk = chunk[take:]
			s.line()
			s.buf, s.cont = s.buf[:0], true
		}
		s.buf = append(s.buf, chunk...)
		if i < 0 {
			break
		}
		if len(s.buf) > 0 || !s.cont {
			s.line()
		}
		s.buf, s.cont = s.buf[:0], false
		b = b[i+1:]
	}
	return n, nil
}

// Flush hands on an unfinished last line, then runs end.
func (s *lineSplitter) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.buf) > 0 {
		s.line()
	}
	s.buf, s.cont = s.buf[:0], false
	if s.end != nil {
		s.end()
	}
}

// line hands buf on, ended by a newline (kept in buf, so that its room is
// reused).
func (s *lineSplitter) line() {
	s.buf = append(s.buf, '\n')
	s.emit(s.buf, s.cont)
}
