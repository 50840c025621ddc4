package envoykit

import (
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// reserveDir holds one lock file per reserved port or base id, shared by
// every process on the host that runs this kit.
var reserveDir = filepath.Join(os.TempDir(), "envoy-agent-test-reservations")

var (
	reservedMu sync.Mutex
	reserved   []*os.File // held open, and so locked, until the process exits
)

// reserve takes what (a kind and a number: "port" 12345) for this process
// until it exits, with an exclusive lock on a file named for it: false
// when another live process holds it. The kernel drops the lock when its
// holder exits, however it exits, so nothing needs cleaning up. Where the
// lock cannot be taken at all (a directory this user cannot write), it
// reserves nothing and says true: the caller's own check (a bind) is then
// the only one, as before.
func reserve(kind string, n int) bool {
	if err := os.MkdirAll(reserveDir, 0o777); err != nil {
		return true
	}
	_ = os.Chmod(reserveDir, 0o1777) // every user's tests share it; best effort
	f, err := os.OpenFile(filepath.Join(reserveDir, kind+"-"+strconv.Itoa(n)), os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return true
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return false
	}
	reservedMu.Lock()
	reserved = append(reserved, f)
	reservedMu.Unlock()
	return true
}
