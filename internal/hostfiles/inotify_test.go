//go:build linux

package hostfiles

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// probeHelperEnv makes this test binary the probe's helper (TestMain).
const probeHelperEnv = "HOSTFILES_PROBE_HELPER"

// probeUID is the user the helper runs as: one of its own, which holds no
// inotify instance, so that filling its limit takes nothing from the
// users that other tests on this host run Envoys as.
const probeUID = 61234

// probeLeft is how many instances the helper leaves its user before it
// probes.
const probeLeft = 3

// TestMain runs the tests, or, run again by one of them, its child: the
// inotify probe's (probeHelperEnv) or the mapping's (mapperEnv).
func TestMain(m *testing.M) {
	if os.Getenv(probeHelperEnv) != "" {
		os.Exit(probeHelper())
	}
	if path := os.Getenv(mapperEnv); path != "" {
		os.Exit(holdMapped(path))
	}
	os.Exit(m.Run())
}

// probeAnswer is what the helper says.
type probeAnswer struct {
	Made                  int // instances it could make before EMFILE
	Max                   int
	Asked10, Asked2       int // ProbeInotify's Instances when asked for 10, then 2
	Watches, WatchesAsked int
}

// probeHelper takes every inotify instance its user can have, gives back
// probeLeft of them, and probes.
func probeHelper() int {
	var fds []int
	for {
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
		if err != nil {
			if !errors.Is(err, unix.EMFILE) {
				return 2
			}
			break
		}
		fds = append(fds, fd)
	}
	a := probeAnswer{Made: len(fds)}
	for _, fd := range fds[len(fds)-probeLeft:] {
		unix.Close(fd)
	}
	dirs := []string{os.TempDir(), "/", "/no/such/folder"}
	r, err := ProbeInotify(10, dirs)
	if err != nil {
		return 3
	}
	a.Max, a.Asked10, a.Watches, a.WatchesAsked = r.MaxInstances, r.Instances, r.Watches, len(dirs)
	if r, err = ProbeInotify(2, nil); err != nil {
		return 3
	}
	a.Asked2 = r.Instances
	_ = json.NewEncoder(os.Stdout).Encode(a)
	return 0
}

// ProbeInotify takes what the user has left, as the kernel counts it: a
// user of its own that holds all but probeLeft of its instances gets
// exactly probeLeft when it asks for more, what it asks for when it asks
// for fewer, and a watch on each folder (one that does not exist counts:
// it costs nothing).
func TestProbeInotifyTakesWhatIsLeft(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runs a user of its own: needs root")
	}
	// A copy of this binary that the helper's user can run.
	dir, err := os.MkdirTemp("", "hostfiles-probe-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "hostfiles.test")
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), probeHelperEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: probeUID, Gid: probeUID}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v (%s)", err, out)
	}
	var a probeAnswer
	if err := json.Unmarshal(out, &a); err != nil {
		t.Fatalf("helper said %q: %v", out, err)
	}
	t.Logf("helper: %+v", a)
	if a.Made != a.Max {
		t.Fatalf("the helper's user could make %d instances, fs.inotify.max_user_instances is %d: another process of uid %d holds some", a.Made, a.Max, probeUID)
	}
	if a.Asked10 != probeLeft || a.Asked2 != 2 {
		t.Errorf("with %d left, asked for 10: %d, for 2: %d; want %d and 2", probeLeft, a.Asked10, a.Asked2, probeLeft)
	}
	if a.Watches != a.WatchesAsked {
		t.Errorf("watches: %d of %d folders", a.Watches, a.WatchesAsked)
	}
}
