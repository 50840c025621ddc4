package manual

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the generated tables in README.md and docs/")

// generatedIn is where each generated table lives: README.md has the commands and exit codes,
// docs/configuration.md the keys.
var generatedIn = map[string]string{
	"| command | what it does |\n":           "../../README.md",
	"| code | meaning |\n":                   "../../README.md",
	"| key | default | meaning | reload |\n": "../../docs/configuration.md",
}

// TestDocTables checks that the commands, exit codes and configuration keys tables in README.md
// and docs/configuration.md say what the code declares (go test ./service/manual -update
// rewrites them).
func TestDocTables(t *testing.T) {
	files := map[string]string{}
	for head, body := range ReadmeTables() {
		path := ""
		for prefix, p := range generatedIn {
			if strings.HasPrefix(head, prefix) {
				path = p
			}
		}
		if path == "" {
			t.Fatalf("no file is named for the table %q", head)
		}
		doc, ok := files[path]
		if !ok {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			doc = string(data)
		}
		start := strings.Index(doc, head)
		if start < 0 {
			t.Errorf("%s has no table starting %q", path, head)
			continue
		}
		start += len(head)
		end := strings.Index(doc[start:], "\n\n")
		if end < 0 {
			end = len(doc) - start
		}
		got := doc[start : start+end+1]
		if got != body {
			if !*update {
				t.Errorf("%s's table %q differs from service/manual (run go test ./service/manual -update):\n--- doc\n%s--- code\n%s", path, strings.SplitN(head, "\n", 2)[0], got, body)
			}
			doc = doc[:start] + body + doc[start+end+1:]
		}
		files[path] = doc
	}
	if *update {
		for path, doc := range files {
			if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestPagesRender renders both man pages and, where groff is installed, has it check them with
// every warning on (as lintian's groff-message check does).
func TestPagesRender(t *testing.T) {
	for _, p := range Pages {
		t.Run(p.File(), func(t *testing.T) {
			var buf bytes.Buffer
			if err := p.Write(&buf, "1.2.3", "2026-12-03"); err != nil {
				t.Fatal(err)
			}
			src := buf.String()
			for _, want := range []string{".TH ", ".SH NAME", ".SH SEE ALSO"} {
				if !strings.Contains(src, want) {
					t.Errorf("no %q in the page", want)
				}
			}
			if p.Section == 8 {
				for _, c := range Commands {
					if !strings.Contains(src, `\fB`+strings.ReplaceAll(c.Name, "-", `\-`)+`\fR`) {
						t.Errorf("command %s is not in the page", c.Name)
					}
				}
				for _, e := range ExitCodes {
					if !strings.Contains(src, ".TP\n\\fB"+string(rune('0'+e.Code))+"\\fR\n") {
						t.Errorf("exit code %d is not in the page", e.Code)
					}
				}
			}
			groff, err := exec.LookPath("groff")
			if err != nil {
				t.Log("no groff: the page is not checked by it")
				return
			}
			cmd := exec.Command(groff, "-man", "-ww", "-z", "-K", "utf8")
			cmd.Stdin = strings.NewReader(src)
			out, err := cmd.CombinedOutput()
			if err != nil || len(out) > 0 {
				t.Errorf("groff -man -ww: %v\n%s", err, out)
			}
		})
	}
}

func TestUsageListsEveryCommand(t *testing.T) {
	u := Usage()
	for _, c := range Commands {
		if !strings.Contains(u, "envoy-agent "+c.Name+" ") {
			t.Errorf("help does not list %s:\n%s", c.Name, u)
		}
	}
}
