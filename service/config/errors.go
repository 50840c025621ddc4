//go:build linux

package config

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/envoy-agent/envoy-agent/internal/printable"
)

const (
	// maxShownProblems is how many problems a ConfigError prints; the rest
	// are counted in one line. A file of 62,000 unknown keys once printed
	// 62,003 lines (4.6 MB) into the journal.
	maxShownProblems = 20
	// maxEcho is the most of one value or key a problem repeats: enough to
	// recognise it, never a megabyte string (or a secret pasted whole).
	maxEcho = 64
	// maxProblemLen caps one problem's message, for values that reach it
	// inside another error.
	maxProblemLen = 1024
)

// shorten cuts s to max bytes at a rune boundary and says how long it was.
func shorten(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:cut], len(s))
}

// Problem is one thing wrong with a configuration file.
type Problem struct {
	File string
	Line int    // 0 when the problem has no line (a missing key)
	Key  string // dotted TOML key, such as "envoy.admin_port"
	Msg  string
}

// String is the problem on one line, its control characters escaped: a
// path or a value from the file, or Envoy's reason, reaches the operator's
// terminal (printable).
func (p Problem) String() string {
	return printable.String(p.line())
}

func (p Problem) line() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Line)
	}
	if p.Key != "" {
		fmt.Fprintf(&b, ": %s", shorten(p.Key, maxEcho))
	}
	fmt.Fprintf(&b, ": %s", shorten(p.Msg, maxProblemLen))
	return b.String()
}

// ConfigError is an invalid configuration: every problem found, each naming
// the file, the line and the key.
type ConfigError struct {
	Problems []Problem
}

// Error lists at most maxShownProblems problems, one a line, the others
// before unknown keys, and counts the rest ("… and 61,980 more unknown keys").
func (e *ConfigError) Error() string {
	// Every other problem before unknown keys, in line order, as room allows.
	var shown []Problem
	var unknown int
	for _, p := range e.Problems {
		if strings.HasPrefix(p.Msg, unknownKeyMsg) {
			unknown++
		}
	}
	room := maxShownProblems - min(len(e.Problems)-unknown, maxShownProblems)
	for _, p := range e.Problems {
		isUnknown := strings.HasPrefix(p.Msg, unknownKeyMsg)
		switch {
		case isUnknown && room > 0:
			room--
		case isUnknown || len(shown) >= maxShownProblems:
			continue
		}
		shown = append(shown, p)
	}
	lines := make([]string, 0, len(shown)+1)
	moreUnknown, moreOther := unknown, len(e.Problems)-unknown
	for _, p := range shown {
		lines = append(lines, p.String())
		if strings.HasPrefix(p.Msg, unknownKeyMsg) {
			moreUnknown--
		} else {
			moreOther--
		}
	}
	var more []string
	if moreUnknown > 0 {
		more = append(more, thousands(moreUnknown)+" more unknown keys")
	}
	if moreOther > 0 {
		more = append(more, thousands(moreOther)+" more problems")
	}
	if len(more) > 0 {
		lines = append(lines, "… and "+strings.Join(more, " and "))
	}
	return strings.Join(lines, "\n")
}

// unknownKeyMsg begins the message of a key the schema does not have.
const unknownKeyMsg = "unknown key"

// thousands writes n with commas: 61,980.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// problems collects Problems for one file, finding each key's line.
type problems struct {
	file  string
	lines *keyLines
	list  []Problem
}

// add records a problem with key; string arguments (the values from the
// file) are shortened to maxEcho bytes.
func (ps *problems) add(key, format string, args ...any) {
	for i, a := range args {
		if s, ok := a.(string); ok {
			args[i] = shorten(s, maxEcho)
		}
	}
	ps.list = append(ps.list, Problem{File: ps.file, Line: ps.lines.line(key), Key: key, Msg: fmt.Sprintf(format, args...)})
}

// err returns the problems in the order of their lines (those without a
// line last), or nil.
func (ps *problems) err() error {
	if len(ps.list) == 0 {
		return nil
	}
	sort.SliceStable(ps.list, func(i, j int) bool {
		li, lj := ps.list[i].Line, ps.list[j].Line
		return li != 0 && (lj == 0 || li < lj)
	})
	return &ConfigError{Problems: ps.list}
}

// keyLines finds the line a key of a flat two-level TOML file is set on.
// toml.MetaData keeps key positions to itself, so this reads the text: it
// follows [table] headers and matches `key =` lines. The text is indexed once,
// on the first look-up, so that a file of many bad keys costs linear time
// (62,000 unknown keys once took 36 s of CPU when each look-up read the file).
type keyLines struct {
	text []string
	once sync.Once
	// first line (1-based) of each "table\x00key", and of each "table\x00"
	// header; keys before any table are in table "".
	at map[string]int
}

func newKeyLines(text []string) *keyLines { return &keyLines{text: text} }

func (kl *keyLines) line(dotted string) int {
	if kl == nil {
		return 0
	}
	kl.once.Do(kl.index)
	table, key, ok := strings.Cut(dotted, ".")
	if !ok {
		// A table of that name, else a key before any table.
		if n := kl.at[dotted+"\x00"]; n > 0 {
			return n
		}
		table, key = "", dotted
	}
	return kl.at[table+"\x00"+key]
}

// index records the first line of each table header and of each key.
func (kl *keyLines) index() {
	kl.at = make(map[string]int)
	first := func(k string, n int) {
		if _, seen := kl.at[k]; !seen {
			kl.at[k] = n
		}
	}
	current := ""
	for i, raw := range kl.text {
		l := strings.TrimSpace(raw)
		if strings.HasPrefix(l, "[") {
			if end := strings.Index(l, "]"); end > 0 {
				current = strings.Trim(strings.TrimSpace(l[1:end]), `"'`)
				first(current+"\x00", i+1)
			}
			continue
		}
		name, _, found := strings.Cut(l, "=")
		if found {
			first(current+"\x00"+strings.Trim(strings.TrimSpace(name), `"'`), i+1)
		}
	}
}

// Problemf is a *ConfigError about key in cfg's file, with its line.
func Problemf(cfg *Config, key, format string, args ...any) error {
	var lines []string
	if data, err := readConfigFile(cfg.File); err == nil {
		lines = strings.Split(string(data), "\n")
	}
	ps := &problems{file: cfg.File, lines: newKeyLines(lines)}
	ps.add(key, format, args...)
	return ps.err()
}
