//go:build linux

package envoy

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
	e := NewEnvoy(ProxyConfig{RunDir: filepath.Join(dir, "run")})
	if _, err := e.ensureRunDir(); err != nil {
		t.Fatal(err)
	}
	failed, err := e.snapshotBootstrap(src, "/etc/envoy/envoy.yaml", 1)
	if err != nil {
		t.Fatal(err)
	}
	restore, err := e.snapshotBootstrap(src, "/etc/envoy/envoy.yaml", 1)
	if err != nil {
		t.Fatal(err)
	}
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
	next := filepath.Join(e.runDir, "epoch-2-3-envoy.yaml")
	if err := os.Symlink(target, next); err != nil {
		t.Fatal(err)
	}
	if _, err := e.snapshotBootstrap(src, "/etc/envoy/envoy.yaml", 2); !errors.Is(err, os.ErrExist) {
		t.Fatalf("copy over a planted link: %v, want a refusal (file exists)", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Fatalf("the link's target was overwritten: %q", b)
	}
}

// TestUpdateConfig: Proxy.UpdateConfig (Istio's API, no caller in the agent) replaces the
// bootstrap atomically with the new bytes, keeps the file's mode, and leaves no temporary file.
func TestUpdateConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "envoy.yaml")
	if err := os.WriteFile(path, []byte("old: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := NewProxy(ProxyConfig{ConfigPath: path})
	if err := p.UpdateConfig([]byte("new: 2\n")); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "new: 2\n" {
		t.Errorf("the bootstrap holds %q, want the new bytes", got)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want the old file's 0600", fi.Mode().Perm())
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("the folder holds %d files, want only the bootstrap (no temporary left)", len(entries))
	}
	if err := NewProxy(ProxyConfig{ConfigPath: filepath.Join(dir, "missing", "envoy.yaml")}).UpdateConfig([]byte("x")); err == nil {
		t.Error("UpdateConfig into a folder that does not exist succeeded")
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
			e := NewEnvoy(ProxyConfig{RunDir: filepath.Join(dir, "run")})
			c, err := e.CopyBootstrap(src)
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
