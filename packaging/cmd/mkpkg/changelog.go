package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/goreleaser/chglog"
)

// unreleased is the heading of CHANGELOG.md's section for changes not yet in a release.
const unreleased = "Unreleased"

// release is one "## VERSION - DATE" section of CHANGELOG.md ("## Unreleased" has no date).
type release struct {
	version string
	date    time.Time
	changes []string
}

// headingRe matches a release heading: "## 1.2.3 - 2026-12-03" or "## Unreleased".
var headingRe = regexp.MustCompile(`^## +(\S+)(?: +- +(\d{4}-\d{2}-\d{2}))? *$`)

// parseChangelog reads CHANGELOG.md: "## " headings, each followed by "- " items (a line indented
// by two spaces continues the item above). Everything before the first heading is prose.
func parseChangelog(path string) ([]release, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []release
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			m := headingRe.FindStringSubmatch(line)
			if m == nil {
				return nil, fmt.Errorf("%s:%d: want \"## VERSION - YYYY-MM-DD\" or \"## %s\"", path, n, unreleased)
			}
			r := release{version: m[1]}
			if m[2] != "" {
				if r.date, err = time.Parse(time.DateOnly, m[2]); err != nil {
					return nil, fmt.Errorf("%s:%d: %w", path, n, err)
				}
			} else if m[1] != unreleased {
				return nil, fmt.Errorf("%s:%d: release %s has no date", path, n, m[1])
			}
			out = append(out, r)
		case len(out) == 0 || strings.TrimSpace(line) == "":
		case strings.HasPrefix(line, "- "):
			r := &out[len(out)-1]
			r.changes = append(r.changes, strings.TrimPrefix(line, "- "))
		case strings.HasPrefix(line, "  ") && len(out[len(out)-1].changes) > 0:
			r := &out[len(out)-1]
			r.changes[len(r.changes)-1] += " " + strings.TrimSpace(line)
		default:
			return nil, fmt.Errorf("%s:%d: want a \"- \" item, an indented continuation or a \"## \" heading", path, n)
		}
	}
	return out, sc.Err()
}

// packageChangelog turns CHANGELOG.md's releases into the entries the packages carry, newest first.
// A build whose version has its own section gets that section on top; any other build (a
// development snapshot, as `gbp dch --snapshot` makes) gets an entry of its own for its version,
// dated date, listing the Unreleased changes. Every version carries the package release.
func packageChangelog(rels []release, version, pkgRelease, packager string, date time.Time) (chglog.ChangeLogEntries, error) {
	entry := func(v string, d time.Time, changes []string) *chglog.ChangeLog {
		e := &chglog.ChangeLog{Semver: v + "-" + pkgRelease, Date: d, Packager: packager}
		e.Deb = &chglog.ChangelogDeb{Urgency: "medium", Distributions: []string{"unstable"}}
		for _, c := range changes {
			e.Changes = append(e.Changes, &chglog.ChangeLogChange{Note: c})
		}
		return e
	}
	var out chglog.ChangeLogEntries
	own := false
	for _, r := range rels {
		if r.version == version {
			own = true
		}
	}
	for _, r := range rels {
		switch {
		case r.version == unreleased && !own:
			changes := r.changes
			if len(changes) == 0 {
				changes = []string{"No changes since the last release."}
			}
			out = append(out, entry(version, date, append([]string{"Development build " + version + "."}, changes...)))
		case r.version == unreleased:
		default:
			if len(r.changes) == 0 {
				return nil, fmt.Errorf("release %s lists no change", r.version)
			}
			out = append(out, entry(r.version, r.date, r.changes))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no %q section and no section for %s", unreleased, version)
	}
	return out, nil
}

// writeChangelog writes CHANGELOG.md's entries for version as chglog YAML at dst (nfpm's
// changelog format, which the .rpm's %changelog is made from) and as a gzipped Debian changelog
// at debDst.
func writeChangelog(src, dst, debDst, name, version, pkgRelease, packager string, date time.Time) error {
	rels, err := parseChangelog(src)
	if err != nil {
		return err
	}
	entries, err := packageChangelog(rels, version, pkgRelease, packager, date)
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	deb, err := debianChangelog(name, entries)
	if err != nil {
		return err
	}
	if err := os.WriteFile(debDst, deb, 0o644); err != nil {
		return err
	}
	return entries.Save(dst)
}

// debianChangelogWidth is where the Debian changelog's lines wrap: lintian warns above 80.
const debianChangelogWidth = 78

// debianChangelog renders entries in the format of debian/changelog (deb-changelog(5)), each item
// wrapped under its "  * ", gzipped as /usr/share/doc/NAME/changelog.Debian.gz wants it (maximum
// compression, no name or time in the header). nfpm's own rendering puts every item on one line.
func debianChangelog(name string, entries chglog.ChangeLogEntries) ([]byte, error) {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "%s (%s) unstable; urgency=medium\n\n", name, e.Semver)
		for _, c := range e.Changes {
			b.WriteString(wrap(c.Note, "  * ", "    ", debianChangelogWidth))
		}
		fmt.Fprintf(&b, "\n -- %s  %s\n", e.Packager, e.Date.UTC().Format("Mon, 02 Jan 2006 15:04:05 -0700"))
	}
	var z bytes.Buffer
	zw, err := gzip.NewWriterLevel(&z, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write([]byte(b.String())); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return z.Bytes(), nil
}

// wrap fills text into lines of at most width columns, the first starting with first, the others
// with rest.
func wrap(text, first, rest string, width int) string {
	var b strings.Builder
	line := first
	empty := true
	for _, w := range strings.Fields(text) {
		if !empty && len(line)+1+len(w) > width {
			b.WriteString(line + "\n")
			line, empty = rest, true
		}
		if !empty {
			line += " "
		}
		line += w
		empty = false
	}
	b.WriteString(line + "\n")
	return b.String()
}
