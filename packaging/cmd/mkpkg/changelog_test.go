package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const sampleChangelog = `# Changelog

Prose before the first heading is skipped.

## Unreleased

- a change not yet released,
  continued on a second line
- another one

## 1.1.0 - 2026-11-02

- the first release
`

func writeTemp(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "CHANGELOG.md")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPackageChangelog(t *testing.T) {
	rels, err := parseChangelog(writeTemp(t, sampleChangelog))
	if err != nil {
		t.Fatal(err)
	}
	built := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		version  string
		versions []string
		first    []string
	}{
		{"a development build gets an entry of its own", "1.1.0+4.gabc1234", []string{"1.1.0+4.gabc1234-1", "1.1.0-1"},
			[]string{"Development build 1.1.0+4.gabc1234.", "a change not yet released, continued on a second line", "another one"}},
		{"a release gets its own section", "1.1.0", []string{"1.1.0-1"}, []string{"the first release"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			entries, err := packageChangelog(rels, tt.version, "1", "M <m@example.org>", built)
			if err != nil {
				t.Fatal(err)
			}
			var versions []string
			for _, e := range entries {
				versions = append(versions, e.Semver)
			}
			if strings.Join(versions, " ") != strings.Join(tt.versions, " ") {
				t.Errorf("versions %v, want %v", versions, tt.versions)
			}
			var notes []string
			for _, c := range entries[0].Changes {
				notes = append(notes, c.Note)
			}
			if strings.Join(notes, "|") != strings.Join(tt.first, "|") {
				t.Errorf("first entry %q, want %q", notes, tt.first)
			}
		})
	}
}

func TestParseChangelogErrors(t *testing.T) {
	for name, text := range map[string]string{
		"heading without date": "## 1.0.0\n- x\n",
		"bad date":             "## 1.0.0 - 2026-13-01\n- x\n",
		"stray text":           "## Unreleased\nnot an item\n",
	} {
		if _, err := parseChangelog(writeTemp(t, text)); err == nil || !strings.Contains(err.Error(), "CHANGELOG.md:") {
			t.Errorf("%s: error %v, want one naming the file and line", name, err)
		}
	}
}

func TestDebianChangelogIsWrappedAndGzipped(t *testing.T) {
	rels, err := parseChangelog(writeTemp(t, "## Unreleased\n- "+strings.Repeat("word ", 40)+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := packageChangelog(rels, "0.0.0+git.abc1234", "1", "M <m@example.org>", time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	gz, err := debianChangelog("envoy-agent", entries)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	if !zr.ModTime.IsZero() || zr.Name != "" {
		t.Errorf("gzip header has a time %v or name %q", zr.ModTime, zr.Name)
	}
	text, _ := io.ReadAll(zr)
	lines := strings.Split(string(text), "\n")
	if lines[0] != "envoy-agent (0.0.0+git.abc1234-1) unstable; urgency=medium" {
		t.Errorf("first line %q", lines[0])
	}
	if !strings.Contains(string(text), "\n -- M <m@example.org>  Thu, 03 Dec 2026 00:00:00 +0000\n") {
		t.Errorf("no trailer line in\n%s", text)
	}
	for _, l := range lines {
		if len(l) > 80 {
			t.Errorf("line of %d characters: %q", len(l), l)
		}
	}
}
