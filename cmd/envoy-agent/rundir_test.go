//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestRunDirOthersCanWriteIsRefused: a run_dir that its group or others can
// write, or that another user owns, is refused before Envoy starts (exit 3,
// naming agent.run_dir); a private one serves, and the admin address file
// the agent makes for Envoy is private too.
func TestRunDirOthersCanWriteIsRefused(t *testing.T) {
	tests := []struct {
		name  string
		mode  os.FileMode
		owner int // -1: the agent's
		want  string
	}{
		{"world-writable", 0o777, -1, "is writable by its group or by others (mode 0777)"},
		{"group-writable", 0o770, -1, "is writable by its group or by others (mode 0770)"},
		{"another user's", 0o700, 65534, "belongs to uid 65534"},
		{"private", 0o700, -1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rd := filepath.Join(t.TempDir(), "rundir")
			if err := os.Mkdir(rd, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(rd, tt.mode); err != nil {
				t.Fatal(err)
			}
			if tt.owner >= 0 {
				if err := os.Chown(rd, tt.owner, tt.owner); err != nil {
					t.Fatal(err)
				}
			}
			p := startAgent(t, procOptions{noWaitReady: tt.want != "", agent: map[string]string{"run_dir": strconv.Quote(rd)}})
			if tt.want == "" {
				fi, err := os.Stat(filepath.Join(rd, "admin-address-epoch-0"))
				if err != nil || fi.Mode().Perm() != 0o600 {
					t.Fatalf("admin address file: %v, mode %v; want 0600", err, fi.Mode())
				}
				return
			}
			code, _ := p.wait(p.started, 30*time.Second)
			if out := p.stderr.String(); code != 3 || !strings.Contains(out, "config.toml:") || !strings.Contains(out, "agent.run_dir: "+rd+" "+tt.want) {
				t.Fatalf("exit %d, want 3 naming agent.run_dir with %q:\n%s", code, tt.want, out)
			}
			if entries, _ := os.ReadDir(rd); len(entries) != 0 {
				t.Errorf("the agent wrote into the refused run_dir: %v", entries)
			}
		})
	}
}
