package shape

import (
	"encoding/json"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// maxFiles is the most .go files (tests included) one package may hold: past it, a newcomer
// cannot name the package's one job.
const maxFiles = 25

// cmdImports are the module's packages cmd/envoy-agent may import: the daemon and its
// packages, and the command table.
var cmdImports = []string{
	"github.com/envoy-agent/envoy-agent/service/manual",
	"github.com/envoy-agent/envoy-agent/service",
	"github.com/envoy-agent/envoy-agent/service/config",
	"github.com/envoy-agent/envoy-agent/service/control",
	"github.com/envoy-agent/envoy-agent/service/handover",
	"github.com/envoy-agent/envoy-agent/service/systemd",
}

type pkg struct {
	ImportPath     string
	Dir            string
	Name           string
	GoFiles        []string
	TestGoFiles    []string
	XTestGoFiles   []string
	IgnoredGoFiles []string
	Imports        []string
	TestImports    []string
	XTestImports   []string
}

// list is `go list -json` of the workspace's packages.
func list(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", "../../...", "../../bench/...", "../../packaging/...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var ps []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	if len(ps) < 10 {
		t.Fatalf("go list found %d packages; expected the whole workspace", len(ps))
	}
	return ps
}

// TestPackageDocs: exactly one file of each package carries the package doc, so `go doc` opens
// with it; a file-header comment directly above `package` would merge into it (leave a blank
// line between them).
func TestPackageDocs(t *testing.T) {
	for _, p := range list(t) {
		fset := token.NewFileSet()
		var withDoc []string
		for _, f := range p.GoFiles {
			af, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			if af.Doc != nil {
				withDoc = append(withDoc, f)
			}
		}
		switch {
		case len(withDoc) == 0:
			t.Errorf("%s has no package doc", p.ImportPath)
		case len(withDoc) > 1:
			t.Errorf("%s: the package doc is merged from %d files (%s): keep it in one (doc.go), and put a blank line between the others' header comments and `package`", p.ImportPath, len(withDoc), strings.Join(withDoc, ", "))
		}
	}
}

// TestPackageSize: no package holds more than maxFiles .go files; there is no exception.
func TestPackageSize(t *testing.T) {
	for _, p := range list(t) {
		n := len(p.GoFiles) + len(p.TestGoFiles) + len(p.XTestGoFiles) + len(p.IgnoredGoFiles)
		if n > maxFiles {
			t.Errorf("%s holds %d .go files, more than %d: split it by job", p.ImportPath, n, maxFiles)
		}
	}
}

// TestCommandImports: cmd/envoy-agent reaches Envoy only through service (docs/design.md,
// Layers).
func TestCommandImports(t *testing.T) {
	for _, p := range list(t) {
		if p.ImportPath != "github.com/envoy-agent/envoy-agent/cmd/envoy-agent" {
			continue
		}
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, "github.com/envoy-agent/envoy-agent") && !slices.Contains(cmdImports, imp) {
				t.Errorf("cmd/envoy-agent imports %s: it calls service/... only (move what it needs behind service)", imp)
			}
		}
		return
	}
	t.Fatal("go list did not list cmd/envoy-agent")
}

// TestConfigLinksNoEnvoy: the configuration package and the control clients, which every client
// command and the man-page generator link, link none of the envoy package, its connection
// counting (envoy/conncount, internal/sockdiag) or protobuf; the mapping onto ProxyConfig lives in service (docs/design.md, Layers).
func TestConfigLinksNoEnvoy(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "../../service/config", "../../service/control", "../../service/manual/cmd/genman").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "github.com/envoy-agent/envoy-agent/service/config") {
		t.Fatalf("go list -deps did not list service/config: %q", deps)
	}
	for _, d := range deps {
		if d == "github.com/envoy-agent/envoy-agent/envoy" || d == "github.com/envoy-agent/envoy-agent/envoy/conncount" || d == "github.com/envoy-agent/envoy-agent/internal/sockdiag" || strings.HasPrefix(d, "google.golang.org/protobuf") {
			t.Errorf("service/config, service/control or genman links %s", d)
		}
	}
}

// module is the root module's path.
const module = "github.com/envoy-agent/envoy-agent"

// upward says why the import of imp by the package at path is upward (docs/design.md, Layers),
// or "": a package never imports an ancestor of its (a command under a package, …/cmd/…, may
// import it); internal/ imports only internal/; envoy/ nothing of service/ or cmd/; service/
// nothing of cmd/. Paths are relative to the module; the tooling modules (bench/, packaging/)
// sit above everything and may import anything.
func upward(path, imp string) string {
	switch {
	case strings.HasPrefix(path, "bench") || strings.HasPrefix(path, "packaging"):
		return ""
	case imp == "" || strings.HasPrefix(path, imp+"/"):
		if !strings.Contains(strings.TrimPrefix(path, imp), "/cmd/") {
			return "an ancestor"
		}
	case strings.HasPrefix(path, "internal/") && !strings.HasPrefix(imp, "internal/"):
		return "internal/ imports only internal/"
	case strings.HasPrefix(path, "envoy") && (strings.HasPrefix(imp, "service") || strings.HasPrefix(imp, "cmd")):
		return "envoy/ is below service/ and cmd/"
	case strings.HasPrefix(path, "service") && strings.HasPrefix(imp, "cmd"):
		return "service/ is below cmd/"
	}
	return ""
}

func TestUpward(t *testing.T) {
	for _, tc := range []struct{ path, imp, want string }{
		{"envoy/certs", "envoy", "an ancestor"},
		{"service/manual/cmd/genman", "service/manual", ""},
		{"internal/envoykit", "envoy/inplace", "internal/ imports only internal/"},
		{"internal/envoykit", "internal/safefile", ""},
		{"envoy", "service/config", "envoy/ is below service/ and cmd/"},
		{"envoy", "envoy/inplace", ""},
		{"service", "cmd/envoy-agent", "service/ is below cmd/"},
		{"service/manual", "service/config", ""},
		{"bench/cmd/bench", "envoy", ""},
	} {
		if got := upward(tc.path, tc.imp); got != tc.want {
			t.Errorf("upward(%s, %s) = %q, want %q", tc.path, tc.imp, got, tc.want)
		}
	}
}

// TestImportsGoDown: no package of the module, its tests included, imports upwards (upward).
func TestImportsGoDown(t *testing.T) {
	for _, p := range list(t) {
		path := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		for _, imp := range slices.Concat(p.Imports, p.TestImports, p.XTestImports) {
			if imp != module && !strings.HasPrefix(imp, module+"/") {
				continue
			}
			if why := upward(path, strings.TrimPrefix(strings.TrimPrefix(imp, module), "/")); why != "" {
				t.Errorf("%s imports %s: %s", p.ImportPath, imp, why)
			}
		}
	}
}
