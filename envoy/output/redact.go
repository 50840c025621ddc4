//go:build linux

package output

import (
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

// jsonDumpRE finds where Envoy starts repeating a configuration as JSON:
// "Unable to parse JSON as proto (...): {" (with --log-format's %j, the
// quotes are escaped).
var jsonDumpRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\): *(\{\\?"|\[)`) })

// pemRE matches a PEM block, or the start of one cut short.
var pemRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*-----(?s:.*?)(-----END [A-Z0-9 ]*-----|$)`)
})

// RedactLine removes from one line of Envoy's output a configuration dump
// and any PEM block, and bounds its length. The expressions are compiled at
// the first line (on the copying goroutine), not at the agent's start.
func RedactLine(l string) string {
	if loc := jsonDumpRE().FindStringIndex(l); loc != nil {
		l = l[:loc[0]] + "): " + redactedDump
	}
	l = pemRE().ReplaceAllString(l, "<PEM block left out>")
	if strings.Contains(l, `\n`) {
		// A JSON log line (--log-format with %j): a proto text dump is
		// in it with its line breaks escaped.
		l = strings.Join(Redact(strings.Split(l, `\n`)), `\n`)
	}
	if len(l) > maxLine {
		l = l[:maxLine] + "..."
	}
	return l
}

// RedactDetails is the first line of an error Envoy gives for a resource
// it refused (config_dump's error_state details, a NACK's error_detail),
// without the configuration it may quote (a proto dump after "): ", which
// may hold a key; a PEM block), as Envoy's log is relayed.
func RedactDetails(d string) string {
	first, _, _ := strings.Cut(d, "\n")
	if i := strings.Index(first, "): "); i >= 0 {
		first = first[:i+2] + " <configuration left out>"
	}
	return RedactLine(first)
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

// redactor relays Envoy's stderr line by line with its configuration dumps
// left out (see Redact); a proto text dump becomes one line saying so. Each
// line it relays is kept in the tail too. It is what stands between Envoy's
// stderr and the agent's; its lineSplitter serializes its calls.
type redactor struct {
	dst    io.Writer
	tail   *tail
	inDump int // lines of the dump under way
}

// line takes one line of stderr; the parts after the first of a line longer
// than maxLine are dropped (a dump in them would not be seen).
func (r *redactor) line(b []byte, cont bool) {
	if cont {
		return
	}
	l := string(b[:len(b)-1])
	if isDumpLine(l) {
		r.inDump++
		return
	}
	r.endDump()
	r.relay(RedactLine(l))
}

func (r *redactor) endDump() {
	if r.inDump > 0 {
		r.relay(redactedDump)
		r.inDump = 0
	}
}

// relay writes one line. An error of dst is dropped: Envoy must not be
// stopped because the agent's own output failed.
func (r *redactor) relay(l string) {
	_, _ = io.WriteString(r.dst, l+"\n")
	r.tail.add(l)
}
