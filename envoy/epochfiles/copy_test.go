//go:build linux

package epochfiles

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/envoy-agent/envoy-agent/internal/safefile"
)

// A failed epoch's clean-up removes its bootstrap copy by name when Envoy is
// reaped, which can be after the epoch that restores the admin API (the same
// epoch number) has written its own copy. Each copy must therefore be a file
// of its own, and a file planted in the run folder must never be written
// through.
func TestBootstrapCopiesNeverShareAFile(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src.yaml")
	if err := os.WriteFile(src, []byte("admin: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(dir, "run")
	if err := os.Mkdir(run, 0o700); err != nil {
		t.Fatal(err)
	}
	var c Copier
	fc, err := c.Copy(run, src, "/etc/envoy/envoy.yaml", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := c.Copy(run, src, "/etc/envoy/envoy.yaml", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	failed, restore := fc.Path, rc.Path
	if failed == restore {
		t.Fatalf("two copies for epoch 1 share the file %s", failed)
	}
	if filepath.Ext(restore) != ".yaml" {
		t.Errorf("copy %s lost the bootstrap's extension (Envoy picks the format by it)", restore)
	}
	// The failed epoch's clean-up runs late.
	if err := os.Remove(failed); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(restore); err != nil {
		t.Fatalf("removing the failed epoch's copy took the restoring epoch's: %v", err)
	}

	// A symbolic link planted under the next name is not followed.
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	next := filepath.Join(run, "epoch-2-3-envoy.yaml")
	if err := os.Symlink(target, next); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Copy(run, src, "/etc/envoy/envoy.yaml", 2, nil); !errors.Is(err, os.ErrExist) {
		t.Fatalf("copy over a planted link: %v, want a refusal (file exists)", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Fatalf("the link's target was overwritten: %q", b)
	}
}

// A reload validates a copy of the bootstrap; the copy must then say
// whether the file was at rest, table-driven over what a writer does after
// the copy was made.
func TestBootstrapCopySourceUnchanged(t *testing.T) {
	// A bootstrap the running copy keeps as it is (inplace.RunningCopy):
	// its node set, no admin for an Envoy configured without one.
	full := []byte("node: {id: n, cluster: c}\nstatic_resources:\n  listeners: []\n  clusters: []\n")
	for _, tc := range []struct {
		name    string
		after   func(t *testing.T, path string)
		changed bool
	}{
		{"at rest", func(*testing.T, string) {}, false},
		{"same, renamed", func(t *testing.T, path string) {
			writeRename(t, path, full)
		}, false},
		{"grown", func(t *testing.T, path string) {
			writeRename(t, path, append(full, "# more\n"...))
		}, true},
		{"same, in place", func(t *testing.T, path string) {
			// As a writer in a loop does: the same (torn) text again.
			// The change time moves in clock ticks; wait for one.
			before, err := safefile.Identify(path)
			if err != nil {
				t.Fatal(err)
			}
			for {
				if err := os.WriteFile(path, full, 0o600); err != nil {
					t.Fatal(err)
				}
				if now, err := safefile.Identify(path); err != nil || now != before {
					return
				}
			}
		}, true},
		{"truncated", func(t *testing.T, path string) {
			if err := os.Truncate(path, 0); err != nil {
				t.Fatal(err)
			}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			src := filepath.Join(dir, "envoy.yaml")
			if err := os.WriteFile(src, full, 0o600); err != nil {
				t.Fatal(err)
			}
			run := filepath.Join(dir, "run")
			if err := os.Mkdir(run, 0o700); err != nil {
				t.Fatal(err)
			}
			c, err := new(Copier).Checked(run, src, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := os.ReadFile(c.Path); err != nil || string(got) != string(full) {
				t.Fatalf("the copy holds %q (%v), want the file", got, err)
			}
			tc.after(t, src)
			err = c.SourceUnchanged()
			if got := errors.Is(err, ErrBootstrapChanged); got != tc.changed {
				t.Fatalf("SourceUnchanged = %v; want changed %v", err, tc.changed)
			}
			if !tc.changed && err != nil {
				t.Fatal(err)
			}
		})
	}
}

func writeRename(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
