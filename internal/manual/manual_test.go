package manual

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite README.md's generated tables")

const readmePath = "../../README.md"

// TestReadmeTables checks that README.md's commands, exit codes and configuration keys tables
// say what the code declares (go test ./internal/manual -update rewrites them).
func TestReadmeTables(t *testing.T) {
	data, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	for head, body := range ReadmeTables() {
		start := strings.Index(readme, head)
		if start < 0 {
			t.Errorf("README.md has no table starting %q", head)
			continue
		}
		start += len(head)
		end := strings.Index(readme[start:], "\n\n")
		if end < 0 {
			end = len(readme) - start
		}
		got := readme[start : start+end+1]
		if got == body {
			continue
		}
		if *update {
			readme = readme[:start] + body + readme[start+end+1:]
			continue
		}
		t.Errorf("README.md's table %q differs from internal/manual (run go test ./internal/manual -update):\n--- README\n%s--- code\n%s", strings.SplitN(head, "\n", 2)[0], got, body)
	}
	if *update {
		if err := os.WriteFile(readmePath, []byte(readme), 0o644); err != nil {
			t.Fatal(err)
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
