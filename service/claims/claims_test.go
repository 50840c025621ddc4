//go:build linux

package claims

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/envoy-agent/envoy-agent/service/config"
)

// TestReadClaim: a claim file is believed only while a process holds its
// lock; a locked file that does not say who holds it names the file's
// owner, plainly unknown.
func TestReadClaim(t *testing.T) {
	tests := []struct {
		name     string
		content  string
		locked   bool
		wantHeld bool
		want     string
	}{
		{"held, says who", `{"pid":42,"config":"/etc/envoy-agent/edge.toml","instance":"edge"}`, true, true, "envoy-agent@edge (pid 42, /etc/envoy-agent/edge.toml)"},
		{"held, says nothing", "", true, true, "an unknown process of uid " + strconv.Itoa(os.Geteuid())},
		{"held, says garbage", "not json", true, true, "an unknown process of uid " + strconv.Itoa(os.Geteuid())},
		{"left by a dead holder", `{"pid":42,"config":"/etc/envoy-agent/edge.toml"}`, false, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.locked {
				f, _, err := lockClaim(dir, "base-id-7")
				if err != nil || f == nil {
					t.Fatalf("lockClaim: %v", err)
				}
				defer f.Close()
				if _, err := f.WriteString(tt.content); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(filepath.Join(dir, "base-id-7"), []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			id, held := readClaim(dir, "base-id-7")
			if held != tt.wantHeld || (held && !strings.Contains(id.String(), tt.want)) {
				t.Fatalf("readClaim = %q, held %v; want %q, held %v", id, held, tt.want, tt.wantHeld)
			}
			if held {
				// A second locker is refused and told who holds it.
				f, holder, err := lockClaim(dir, "base-id-7")
				if err != nil || f != nil || holder.String() != id.String() {
					t.Fatalf("second lockClaim = %v, %q, %v; want refused naming %q", f, holder, err, id)
				}
			}
		})
	}
}

// TestPortInUseNamesTheWholeHolder: the holder of a taken port reaches the
// error whole. config.Problemf shortens string arguments to 64 bytes (they
// are values echoed from the file); the holder's name, passed as a string,
// was cut to "… (73 bytes)" (TestTwoAgentsClash caught it).
func TestPortInUseNamesTheWholeHolder(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvDir, dir)
	const port = 19999
	f, _, err := lockClaim(dir, portClaim(port))
	if err != nil || f == nil {
		t.Fatalf("lockClaim: %v", err)
	}
	defer f.Close()
	holder := agentIdentity{Pid: 42, Config: "/etc/envoy-agent/" + strings.Repeat("x", 80) + ".toml"}
	writeIdentity(f, holder)
	cfg := &config.Config{File: filepath.Join(dir, "config.toml")}
	err = portInUse(cfg, "agent.status_port", port, syscall.EADDRINUSE)
	if err == nil || !strings.Contains(err.Error(), holder.String()) {
		t.Fatalf("portInUse = %v; want it to name %s", err, holder)
	}
}

// TestClaimsDirs: where each kind of agent keeps its claims. None is ever
// in the temporary folder (any local user can make a name there first: a
// squatted envoy-agent-claims-UID stopped every start outside the units);
// the packaged user outside the units (home /nonexistent, no
// $XDG_RUNTIME_DIR) finds the units' state folder.
func TestClaimsDirs(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		euid int
		want []string
	}{
		{"ENVOY_AGENT_CLAIMS_DIR", map[string]string{EnvDir: "/srv/claims", "STATE_DIRECTORY": "/var/lib/x"}, 0, []string{"/srv/claims"}},
		{"under a unit", map[string]string{"STATE_DIRECTORY": "/var/lib/envoy-agent:/var/lib/other"}, 999, []string{"/var/lib/envoy-agent/claims"}},
		{"root", map[string]string{"HOME": "/root"}, 0, []string{"/run/envoy-agent-claims"}},
		{"a user with a runtime folder", map[string]string{"XDG_RUNTIME_DIR": "/run/user/1000", "HOME": "/home/a"}, 1000,
			[]string{"/run/user/1000/envoy-agent-claims", "/var/lib/envoy-agent/claims", "/home/a/.cache/envoy-agent-claims"}},
		{"the packaged user outside the units", map[string]string{"HOME": "/nonexistent", "TMPDIR": "/tmp"}, 999,
			[]string{"/var/lib/envoy-agent/claims", "/nonexistent/.cache/envoy-agent-claims"}},
		{"relative variables are not folders", map[string]string{"XDG_RUNTIME_DIR": "run", "XDG_CACHE_HOME": "cache", "HOME": ""}, 1000,
			[]string{"/var/lib/envoy-agent/claims"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := claimsDirs(func(k string) string { return tt.env[k] }, tt.euid)
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Fatalf("claimsDirs = %q, want %q", got, tt.want)
			}
			for _, d := range got {
				if strings.HasPrefix(d, os.TempDir()) || strings.HasPrefix(d, "/tmp/") {
					t.Fatalf("%s is in the temporary folder", d)
				}
			}
		})
	}
}
