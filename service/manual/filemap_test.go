package manual

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// mapPath is a path in docs/development.md's file map: a backquoted name with a slash.
var mapPath = regexp.MustCompile("`([a-z][a-z0-9_./-]*/[a-z0-9_./-]*)`")

// TestFileMap keeps docs/development.md's file map true: every path it names exists, and every
// Go package of the module is on it (by its folder or one of its files).
func TestFileMap(t *testing.T) {
	data, err := os.ReadFile("../../docs/development.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	_, fileMap, ok := strings.Cut(doc, "Where each behaviour lives")
	if !ok {
		t.Fatal("docs/development.md has no file map (\"Where each behaviour lives\")")
	}
	named := map[string]bool{}
	for _, m := range mapPath.FindAllStringSubmatch(fileMap, -1) {
		p := m[1]
		if strings.Contains(p, "...") {
			continue // a pattern such as service/..., not a path
		}
		if _, err := os.Stat(filepath.Join("../..", p)); err != nil {
			t.Errorf("the file map names %s, which does not exist", p)
		}
		named[strings.TrimSuffix(p, "/")] = true
		if strings.HasSuffix(p, ".go") {
			named[filepath.Dir(p)] = true
		}
	}
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", "../../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for dir := range strings.FieldsSeq(string(out)) {
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(rel, "service/manual") {
			continue // the map's own checker, and genman beside it
		}
		if !named[rel] {
			t.Errorf("package %s is not on docs/development.md's file map", rel)
		}
	}
}
