//go:build linux

package config

import (
	"fmt"
	"sort"
	"strings"
)

// Problem is one thing wrong with a configuration file.
type Problem struct {
	File string
	Line int    // 0 when the problem has no line (a missing key)
	Key  string // dotted TOML key, such as "envoy.admin_port"
	Msg  string
}

func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Line)
	}
	if p.Key != "" {
		fmt.Fprintf(&b, ": %s", p.Key)
	}
	fmt.Fprintf(&b, ": %s", p.Msg)
	return b.String()
}

// ConfigError is an invalid configuration: every problem found, each naming
// the file, the line and the key.
type ConfigError struct {
	Problems []Problem
}

func (e *ConfigError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// problems collects Problems for one file, finding each key's line.
type problems struct {
	file  string
	lines keyLines
	list  []Problem
}

func (ps *problems) add(key, format string, args ...any) {
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
// follows [table] headers and matches `key =` lines.
type keyLines []string

func (kl keyLines) line(dotted string) int {
	table, key, ok := strings.Cut(dotted, ".")
	if !ok {
		// A table of that name, else a key before any table.
		if n := kl.lookup(dotted, ""); n > 0 {
			return n
		}
		table, key = "", dotted
	}
	return kl.lookup(table, key)
}

// lookup finds `key =` in [table], or the [table] header when key is "".
func (kl keyLines) lookup(table, key string) int {
	current := ""
	for i, raw := range kl {
		l := strings.TrimSpace(raw)
		if strings.HasPrefix(l, "[") {
			if end := strings.Index(l, "]"); end > 0 {
				current = strings.Trim(strings.TrimSpace(l[1:end]), `"'`)
				if current == table && key == "" {
					return i + 1
				}
			}
			continue
		}
		if current != table {
			continue
		}
		name, _, found := strings.Cut(l, "=")
		if found && strings.Trim(strings.TrimSpace(name), `"'`) == key {
			return i + 1
		}
	}
	return 0
}

// Problemf is a *ConfigError about key in cfg's file, with its line.
func Problemf(cfg *Config, key, format string, args ...any) error {
	var lines []string
	if data, err := readConfigFile(cfg.File); err == nil {
		lines = strings.Split(string(data), "\n")
	}
	ps := &problems{file: cfg.File, lines: lines}
	ps.add(key, format, args...)
	return ps.err()
}
