//go:build linux

package envoy

import "io"

// relays are the writers Envoy's outputs are copied to: a whole line at a
// time (lineWriter, so two epochs never interleave mid-line and each line
// keeps Envoy's level), and for stderr without the configuration dumps
// Envoy prints (redactWriter), with the last lines kept in the tail. Their
// Flush runs once the outputs are copied (flushRelays).
func (p *process) relays(stdout, stderr io.Writer) (out, errw io.Writer) {
	outLines, errLines := newLineWriter(stdout), newLineWriter(stderr)
	redact := newRedactWriter(io.MultiWriter(errLines, p.tail))
	p.flushes = append(p.flushes, redact.Flush, outLines.Flush, errLines.Flush)
	return outLines, redact
}

// flushRelays writes out what the relays still hold (a last line without
// its newline).
func (p *process) flushRelays() {
	for _, f := range p.flushes {
		f()
	}
}
