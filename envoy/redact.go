//go:build linux

package envoy

import (
	"bytes"
	"io"
	"regexp"
	"strings"
	"sync"
)

// Envoy repeats the bootstrap it rejects in its error message: a bootstrap
// that does not parse as its proto (a wrong type: port_value: "x",
// connect_timeout: 1x) comes back as one JSON line after "): ", and one
// that fails proto validation as proto text, one field a line, between the
// two halves of the message. Bootstraps hold private keys and tokens, so
// none of it may reach the agent's log, an error or an HTTP answer. Seen
// with Envoy 1.36 to 1.40.

// redactedDump replaces a configuration dump cut out of a line.
const redactedDump = "<Envoy's copy of the configuration left out>"

// maxRelayedLine bounds one line of Envoy's output the agent relays; the
// rest of a longer line is dropped (a dump line is cut before that).
const maxRelayedLine = 16 << 10

// jsonDumpRE finds where Envoy starts repeating a configuration as JSON:
// "Unable to parse JSON as proto (...): {" (with --log-format's %j, the
// quotes are escaped).
var jsonDumpRE = regexp.MustCompile(`\): *(\{\\?"|\[)`)

// pemRE matches a PEM block, or the start of one cut short.
var pemRE = regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*-----(?s:.*?)(-----END [A-Z0-9 ]*-----|$)`)

// RedactLine removes from one line of Envoy's output a configuration dump
// and any PEM block, and bounds its length.
func RedactLine(l string) string {
	if loc := jsonDumpRE.FindStringIndex(l); loc != nil {
		l = l[:loc[0]] + "): " + redactedDump
	}
	l = pemRE.ReplaceAllString(l, "<PEM block left out>")
	if strings.Contains(l, `\n`) {
		// A JSON log line (--log-format with %j): a proto text dump is
		// in it with its line breaks escaped.
		l = strings.Join(Redact(strings.Split(l, `\n`)), `\n`)
	}
	return truncate(l, maxRelayedLine)
}

// isDumpLine reports whether a line of Envoy's output belongs to a proto
// text dump: an indented field, a message's opening or closing line. Envoy's
// own log lines start with "[" (or "{" with a JSON log format) and end
// otherwise; its unprefixed messages (": Proto constraint ...", "cannot
// bind ...") are not indented.
func isDumpLine(l string) bool {
	t := strings.TrimSpace(l)
	return t != "" && (t == "}" || strings.HasSuffix(t, "{") || l[0] == ' ' || l[0] == '\t')
}

// Redact returns Envoy's output lines without configuration dumps: the lines
// of a proto text dump are dropped and every other line goes through
// RedactLine.
func Redact(lines []string) []string {
	var out []string
	for _, l := range lines {
		if strings.TrimSpace(l) == "" || isDumpLine(l) {
			continue
		}
		out = append(out, RedactLine(l))
	}
	return out
}

// redactWriter relays Envoy's output line by line with its configuration
// dumps left out (see Redact); a proto text dump becomes one line saying so.
// It is what stands between Envoy's stderr and the agent's.
type redactWriter struct {
	mu       sync.Mutex
	dst      io.Writer
	line     []byte
	overflow bool // the line under way passed maxRelayedLine; the rest is dropped
	inDump   int  // lines of the dump under way
}

func newRedactWriter(dst io.Writer) *redactWriter { return &redactWriter{dst: dst} }

// Write never fails: losing the destination must not block or stop Envoy.
func (w *redactWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		chunk := b
		if i >= 0 {
			chunk = b[:i]
		}
		if room := maxRelayedLine - len(w.line); len(chunk) > room {
			chunk, w.overflow = chunk[:max(room, 0)], true
		}
		w.line = append(w.line, chunk...)
		if i < 0 {
			break
		}
		w.emit(string(w.line))
		w.line, w.overflow = w.line[:0], false
		b = b[i+1:]
	}
	return n, nil
}

// Flush relays an unfinished last line.
func (w *redactWriter) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.line) > 0 {
		w.emit(string(w.line))
		w.line = w.line[:0]
	}
	w.endDump()
}

func (w *redactWriter) emit(l string) {
	if isDumpLine(l) {
		w.inDump++
		return
	}
	w.endDump()
	_, _ = io.WriteString(w.dst, RedactLine(l)+"\n")
}

func (w *redactWriter) endDump() {
	if w.inDump > 0 {
		_, _ = io.WriteString(w.dst, redactedDump+"\n")
		w.inDump = 0
	}
}
