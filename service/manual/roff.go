package manual

import (
	"fmt"
	"io"
	"strings"
)

// roff writes man(7) source.
type roff struct {
	w   io.Writer
	err error
}

func (r *roff) line(format string, args ...any) {
	if r.err == nil {
		_, r.err = fmt.Fprintf(r.w, format+"\n", args...)
	}
}

// text writes a paragraph of prose; `code` in backquotes turns bold.
func (r *roff) text(s string) { r.line("%s", inline(s)) }

func (r *roff) section(name string) { r.line(".SH %s", strings.ToUpper(name)) }

func (r *roff) para() { r.line(".PP") }

// item starts a tagged paragraph: tag (bold), then the body.
func (r *roff) item(tag, body string) {
	r.line(".TP")
	r.line("%s", bold(tag))
	r.text(body)
}

// escape makes s safe as roff text: backslashes, and a control character at a line's start.
func escape(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

func bold(s string) string { return `\fB` + escape(s) + `\fR` }

// inline renders prose: `code` bold, the rest escaped.
func inline(s string) string {
	var b strings.Builder
	for i, part := range strings.Split(s, "`") {
		if i%2 == 1 {
			b.WriteString(`\fB` + strings.ReplaceAll(strings.ReplaceAll(part, `\`, `\e`), "-", `\-`) + `\fR`)
			continue
		}
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(part, `\`, `\e`), "-", `\-`))
	}
	out := b.String()
	if strings.HasPrefix(out, ".") || strings.HasPrefix(out, "'") {
		out = `\&` + out
	}
	return out
}
