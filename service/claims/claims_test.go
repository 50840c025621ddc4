//go:build linux

package claims

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
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
