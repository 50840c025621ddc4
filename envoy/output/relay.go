//go:build linux

package output

import "io"

// Relay is where one Envoy process's outputs are copied: Stdout and Stderr
// take what Envoy writes, in pieces of any size, and pass it on a whole line
// per Write; Stderr leaves Envoy's copies of the configuration out
// (redactor) and keeps the last lines. Flush once the outputs are copied.
type Relay struct {
	out, err *lineSplitter
	tail     *tail
}

// NewRelay returns the relay of one Envoy process to stdout and stderr,
// which the relays of other epochs may share.
func NewRelay(stdout, stderr io.Writer) *Relay {
	t := &tail{max: tailLines}
	red := &redactor{dst: stderr, tail: t}
	return &Relay{
		out: &lineSplitter{emit: func(line []byte, _ bool) {
			// An error of stdout is dropped: Envoy must not be stopped
			// (its pipe must keep draining) because the agent's own
			// output failed.
			_, _ = stdout.Write(line)
		}},
		err:  &lineSplitter{emit: red.line, end: red.endDump},
		tail: t,
	}
}

// Stdout is the writer Envoy's stdout is copied to.
func (r *Relay) Stdout() io.Writer { return r.out }

// Stderr is the writer Envoy's stderr is copied to.
func (r *Relay) Stderr() io.Writer { return r.err }

// Flush passes on what the relay still holds: a last line without its
// newline, the end of a configuration dump.
func (r *Relay) Flush() {
	r.out.Flush()
	r.err.Flush()
}

// LastLines returns the last lines Envoy wrote to stderr, redacted.
func (r *Relay) LastLines() []string {
	return Redact(r.tail.Lines())
}
