//go:build linux

package hostfiles

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
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

// TestMapsNames: a line of /proc/PID/maps names the path when it ends with
// it, or has it before " (deleted)"; a longer name that starts with it
// does not.
func TestMapsNames(t *testing.T) {
	const path = "/dev/shm/envoy_shared_memory_7"
	line := "7f1c2a000000-7f1c2a400000 rw-s 00000000 00:1a 42                         "
	for _, tt := range []struct {
		maps string
		want bool
	}{
		{line + path + "\n", true},
		{line + path, true},
		{line + path + " (deleted)\n", true},
		{line + path + "0\n" + line + "/usr/lib/libc.so.6\n", false},
		{line + path + "0\n" + line + path + "\n", true},
		{"", false},
	} {
		if got := mapsNames([]byte(tt.maps), []byte(" "+path)); got != tt.want {
			t.Errorf("mapsNames(%q) = %v, want %v", tt.maps, got, tt.want)
		}
	}
}

// mapperEnv names the file the test binary, run again by
// TestProcessMapping, maps (TestMain, holdMapped).
const mapperEnv = "ENVOY_AGENT_TEST_MAP"

// holdMapped is TestProcessMapping's child (TestMain, with mapperEnv
// set): it maps the file at path, says so on stdout, and holds it until
// its stdin closes.
func holdMapped(path string) int {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ, unix.MAP_SHARED); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("mapped")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// TestProcessMapping finds the process that maps a file (a child here:
// the agent's own pid is skipped), and none while nobody maps it.
func TestProcessMapping(t *testing.T) {
	f, err := os.CreateTemp("/dev/shm", "envoy-agent-test-")
	if err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	defer os.Remove(f.Name())
	if err := f.Truncate(4096); err != nil {
		t.Fatal(err)
	}
	if got := processMapping(f.Name()); got != 0 {
		t.Fatalf("processMapping of a file nobody maps: pid %d", got)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), mapperEnv+"="+f.Name())
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { in.Close(); _ = cmd.Wait() }()
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if got := processMapping(f.Name()); got != cmd.Process.Pid {
		t.Fatalf("processMapping = pid %d, want the child's %d", got, cmd.Process.Pid)
	}
}
