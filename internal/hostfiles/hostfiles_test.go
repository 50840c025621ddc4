//go:build linux

package hostfiles

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSharedMemoryPath(t *testing.T) {
	tests := []struct {
		baseID uint32
		want   string
	}{
		{0, "/dev/shm/envoy_shared_memory_0"},
		{7, "/dev/shm/envoy_shared_memory_70"},
		{(1<<32 - 1) / BaseIDScale, "/dev/shm/envoy_shared_memory_4294967290"},
	}
	for _, tt := range tests {
		if got := SharedMemoryPath(tt.baseID); got != tt.want {
			t.Errorf("SharedMemoryPath(%d) = %q, want %q", tt.baseID, got, tt.want)
		}
	}
}

func TestCheckHotRestartSocketPath(t *testing.T) {
	tests := []struct {
		runDir  string
		baseID  uint32
		wantErr bool
	}{
		{"/run/envoy-agent", 0, false},
		{"/" + strings.Repeat("d", 80), 0, false},
		{"/" + strings.Repeat("d", 90), 0, true},
		{"/" + strings.Repeat("d", 80), 429496729, true},
	}
	for _, tt := range tests {
		err := CheckHotRestartSocketPath(tt.runDir, tt.baseID)
		if (err != nil) != tt.wantErr {
			t.Errorf("CheckHotRestartSocketPath(%d-byte folder, %d) = %v, want an error: %v", len(tt.runDir), tt.baseID, err, tt.wantErr)
		}
		if err == nil {
			for _, f := range HotRestartSocketFiles(HotRestartSocketPrefix(tt.runDir), tt.baseID) {
				if len(f) > sunPathMax {
					t.Errorf("accepted %s, which is %d bytes", f, len(f))
				}
			}
		}
	}
}

type discardLog struct{}

func (discardLog) Infof(string, ...any) {}
func (discardLog) Warnf(string, ...any) {}

// TestClearLeftovers: an earlier agent's files go from the run folder,
// whatever else the folder holds stays, and a fresh folder is not searched.
func TestClearLeftovers(t *testing.T) {
	left := []string{"epoch-0-1-envoy.yaml", "admin-address-epoch-0", "hot-restart_parent_70", "handover-1.json"}
	kept := []string{"admin.sock", "envoy.yaml", "control.sock"}
	for _, temporary := range []bool{false, true} {
		dir := t.TempDir()
		for _, f := range append(slices.Clone(left), kept...) {
			if err := os.WriteFile(filepath.Join(dir, f), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		l := Leftovers{RunDir: dir, Temporary: temporary, HotRestartSocket: HotRestartSocketPrefix(dir), BaseID: 7}
		if err := ClearLeftovers(l, discardLog{}); err != nil {
			t.Fatal(err)
		}
		want := kept
		if temporary {
			want = append(slices.Clone(left), kept...)
		}
		entries, _ := os.ReadDir(dir)
		var got []string
		for _, e := range entries {
			got = append(got, e.Name())
		}
		slices.Sort(got)
		want = slices.Sorted(slices.Values(want))
		if !slices.Equal(got, want) {
			t.Errorf("temporary %v: the folder holds %v, want %v", temporary, got, want)
		}
	}
}
