//go:build linux

package versions

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// The real Envoy answers, through a wrapper that notes each run: a binary
// is asked each question once per file identity, and again once the file
// changes.
func TestCacheAsksOncePerFile(t *testing.T) {
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	bin := filepath.Join(dir, "envoy")
	writeWrapper := func(path string) {
		script := "#!/bin/sh\necho \"$1\" >> " + runs + "\nexec " + envoykit.Binary(t) + " \"$@\"\n"
		if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeWrapper(bin)
	count := func() int {
		b, err := os.ReadFile(runs)
		if os.IsNotExist(err) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(b), "\n")
	}
	ctx := context.Background()
	var c Cache
	if _, _, ok := c.Cached(bin); ok {
		t.Fatalf("Cached knows a binary never asked")
	}
	ask := func(what string, wantRuns int) {
		t.Helper()
		v, err := c.Version(ctx, bin)
		if err != nil || !strings.Contains(v, " version: ") {
			t.Fatalf("%s: Version = %q, %v", what, v, err)
		}
		hr, err := c.HotRestartVersion(ctx, bin)
		if err != nil || !strings.HasPrefix(hr, "11.") {
			t.Fatalf("%s: HotRestartVersion = %q, %v", what, hr, err)
		}
		if n := count(); n != wantRuns {
			t.Errorf("%s: the binary ran %d times in all, want %d", what, n, wantRuns)
		}
		if cv, chr, ok := c.Cached(bin); !ok || cv != v || chr != hr {
			t.Errorf("%s: Cached = %q, %q, %v; want the answers just given", what, cv, chr, ok)
		}
	}
	ask("first", 2)
	ask("unchanged", 2)

	// Touched (a new modification time): asked again.
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(bin, later, later); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := c.Cached(bin); ok {
		t.Errorf("Cached still answers for a touched binary")
	}
	ask("touched", 4)

	// Replaced by another file (a new inode), as a package upgrade does.
	next := filepath.Join(dir, "envoy.new")
	writeWrapper(next)
	if err := os.Rename(next, bin); err != nil {
		t.Fatal(err)
	}
	ask("replaced", 6)
	ask("replaced, unchanged", 6)

	// A binary that fails is asked again each time: failures are not kept.
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho \"$1\" >> "+runs+"\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := c.Version(ctx, bin); err == nil {
			t.Fatalf("Version of a failing binary succeeded")
		}
	}
	if n := count(); n != 8 {
		t.Errorf("a failing binary ran %d times in all, want 8 (asked each time)", n)
	}
}
