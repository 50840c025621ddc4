//go:build linux

package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestBadTOMLIsBoundedInWorkAndOutput: 62,000 unknown keys (about 1 MB) once
// took 36 s of CPU and printed 62,003 lines, and a 1 MB value was echoed
// whole. Now at most maxShownProblems lines and a count of the rest are
// printed, and no value or key is repeated beyond maxEcho bytes. (The time
// is not asserted: the look-up of each key's line is an index built once.)
func TestBadTOMLIsBoundedInWorkAndOutput(t *testing.T) {
	dir, bin := configDir(t)
	head := "[envoy]\nbinary_path = \"" + bin + "\"\nconfig_path = \"envoy.yaml\"\nadmin_port = 15000\n"
	var unknown strings.Builder
	unknown.WriteString(head + "[agent]\n")
	for i := range 62000 {
		fmt.Fprintf(&unknown, "unknow%05d = 1\n", i)
	}
	big := strings.Repeat("s", 1<<20-200)
	tests := []struct {
		name, text string
		// want is a line the error must have; notWant a text it must not.
		want, notWant string
		maxLines      int
	}{
		{"62,000 unknown keys", unknown.String(), "… and 61,980 more unknown keys", "unknow00020:", maxShownProblems + 1},
		{"a 1 MB string value", head + "log_level = \"" + big + "\"\n", "envoy.log_level: unknown level \"" + big[:maxEcho] + "… (1048376 bytes)\"",
			big[:maxEcho+1], 1},
		// Refused before decoding (nesting.go), still echoed in 64 bytes.
		{"a 1 MB key", head + big + " = 1\n", fmt.Sprintf(":%d: ", strings.Count(head, "\n")+1) + big[:maxEcho] + "… (1048376 bytes): a key of 1048376 bytes; more than 1024", big[:maxEcho+1], 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if len(tt.text) > maxConfigSize {
				t.Fatalf("the test's file is %d bytes, over the %d the agent reads", len(tt.text), maxConfigSize)
			}
			_, err := LoadConfig(writeConfig(t, dir, tt.text))
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("LoadConfig: %v, want a *ConfigError", err)
			}
			out := ce.Error()
			lines := strings.Split(out, "\n")
			if len(lines) > tt.maxLines || len(out) > tt.maxLines*(maxProblemLen+200) {
				t.Errorf("the error is %d lines, %d bytes; want at most %d lines", len(lines), len(out), tt.maxLines)
			}
			if !strings.Contains(out, tt.want) {
				t.Errorf("the error does not say %q:\n%.2000s", tt.want, out)
			}
			if strings.Contains(out, tt.notWant) {
				t.Errorf("the error has %.80q, which it should not echo", tt.notWant)
			}
		})
	}
}

// TestConfigErrorShowsOtherProblemsBeforeUnknownKeys: a real problem is
// never hidden behind the count of unknown keys.
func TestConfigErrorShowsOtherProblemsBeforeUnknownKeys(t *testing.T) {
	var ps []Problem
	for i := range 30 {
		ps = append(ps, Problem{File: "f.toml", Line: i + 1, Key: fmt.Sprintf("agent.k%d", i), Msg: unknownKeyMsg})
	}
	ps = append(ps, Problem{File: "f.toml", Line: 40, Key: "agent.log_format", Msg: `unknown format "xml" (text or json)`})
	out := (&ConfigError{Problems: ps}).Error()
	lines := strings.Split(out, "\n")
	if len(lines) != maxShownProblems+1 || !strings.Contains(out, "agent.log_format") ||
		lines[len(lines)-1] != "… and 11 more unknown keys" {
		t.Errorf("got %d lines:\n%s", len(lines), out)
	}
}

// TestProblemEscapesControlCharacters: a path or a value from the file
// reaches the terminal in a problem with its control characters escaped,
// on one line.
func TestProblemEscapesControlCharacters(t *testing.T) {
	p := Problem{File: "/etc/envoy-agent/\x1b]0;t\x07.toml", Line: 2, Key: "envoy.binary_path", Msg: "/opt/\r\x1b[2KOK\n: refused"}
	got := p.String()
	if strings.ContainsAny(got, "\x1b\x07\r\n") || !strings.Contains(got, `\x1b]0;t\x07.toml:2: envoy.binary_path: /opt/\x0d\x1b[2KOK\x0a: refused`) {
		t.Fatalf("Problem.String = %q", got)
	}
}
