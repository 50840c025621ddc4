package manual

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeMaxLines keeps README.md an operator's first page; the manual is under docs/.
const readmeMaxLines = 300

// TestReadmeIsAFirstPage: README.md opens with the two commands that work on a fresh machine
// and stays short.
func TestReadmeIsAFirstPage(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	if n := strings.Count(readme, "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move the detail to docs/", n, readmeMaxLines)
	}
	first := strings.SplitN(readme, "```", 3)
	if len(first) < 3 || !strings.Contains(first[1], "make run") || !strings.Contains(first[1], "make test") {
		t.Errorf("README.md's first code block must be `make run` and `make test`")
	}
}

var (
	mdLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdHeading = regexp.MustCompile("(?m)^#+ (.*)$")
	slugDrop  = regexp.MustCompile(`[^\p{L}\p{N}\- _]`)
)

// anchors lists the GitHub anchors of a Markdown file's headings.
func anchors(doc string) map[string]bool {
	a := map[string]bool{}
	inCode := false
	for line := range strings.SplitSeq(doc, "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if inCode {
			continue
		}
		if m := mdHeading.FindStringSubmatch(line); m != nil {
			s := strings.ToLower(strings.TrimSpace(m[1]))
			s = slugDrop.ReplaceAllString(s, "")
			a[strings.ReplaceAll(s, " ", "-")] = true
		}
	}
	return a
}

// TestDocLinks: every relative link in README.md and docs/ names a file that exists and, with
// #anchor, a heading in it, so that moving a section cannot leave a link behind.
func TestDocLinks(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(data), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			dest := f
			if path != "" {
				dest = filepath.Join(filepath.Dir(f), path)
			}
			d, err := os.ReadFile(dest)
			if err != nil {
				if _, serr := os.Stat(dest); serr == nil {
					continue // a folder
				}
				t.Errorf("%s: link %q: %v", filepath.Base(f), target, err)
				continue
			}
			if anchor != "" && !anchors(string(d))[anchor] {
				t.Errorf("%s: link %q: no heading #%s in %s", filepath.Base(f), target, anchor, dest)
			}
		}
	}
}
