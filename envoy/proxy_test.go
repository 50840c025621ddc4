//go:build linux

package envoy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

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

// A plan in place without its plan is refused, not run as a hot restart,
// and its copy is removed.
func TestReloadInPlaceNeedsItsPlan(t *testing.T) {
	copied := filepath.Join(t.TempDir(), "epoch-1-1-envoy.yaml")
	if err := os.WriteFile(copied, []byte("admin: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := NewEnvoy(ProxyConfig{})
	if _, err := e.Reload(context.Background(), ReloadPlan{Path: InPlace, Copied: copied}); err == nil {
		t.Error("Reload in place with no plan: no error")
	}
	if _, err := os.Stat(copied); !os.IsNotExist(err) {
		t.Errorf("the refused plan's copy is still there (%v)", err)
	}
}

// A plan prints as one line that names its path, what that path does and
// its bound: what a dry run shows.
func TestReloadPlanString(t *testing.T) {
	for _, tc := range []struct {
		plan ReloadPlan
		want []string
	}{
		{ReloadPlan{Path: HotRestart, Copied: "/run/a/epoch-2-5-envoy.yaml", Timeout: 10 * time.Second},
			[]string{"hot_restart;", "epoch-2-5-envoy.yaml", "within 10s"}},
		{ReloadPlan{Path: DrainRestart, Config: ProxyConfig{DisableHotRestart: true}, Copied: "c",
			Restart: RestartPlan{MinDrain: time.Second, MaxDrain: 5 * time.Second, StartTimeout: 3 * time.Second}, Timeout: 11 * time.Second},
			[]string{"drain_restart: drain 1s to 5s, then start within 3s, with --disable-hot-restart", "within 11s"}},
		{ReloadPlan{Path: InPlace, Copied: "c", Timeout: time.Second}, []string{"in_place;", "within 1s"}},
	} {
		got := tc.plan.String()
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: lacks %q", got, w)
			}
		}
	}
}
