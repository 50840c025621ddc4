//go:build linux

package reexec

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// HandoverState is what a new agent needs to adopt the running Envoys when
// the old agent re-executes into it (a live upgrade of the agent): every
// epoch not yet reaped, and the run folder's bookkeeping. Package envoy
// makes it (Envoy.Handover) and reads it (AdoptEnvoy); the agent that hands
// over serializes it.
type HandoverState struct {
	RunDir    string `json:"run_dir"`
	OwnRunDir bool   `json:"own_run_dir"` // the run folder is a temporary one the proxy made
	Snapshots uint64 `json:"snapshots"`   // the bootstrap copies' sequence, so new names never collide
	// HotRestartSocket is the epochs' --socket-path; "" when they use
	// Envoy's abstract sockets (an agent that wrote handover version 1
	// ran them so): the next epoch must find its parent where it is.
	HotRestartSocket string       `json:"hot_restart_socket"`
	Epochs           []EpochState `json:"epochs"`
}

// EpochState is one running Envoy epoch in a HandoverState.
type EpochState struct {
	Epoch            int           `json:"epoch"`
	Pid              int           `json:"pid"`
	Serving          bool          `json:"serving"`
	StartedUnixNano  int64         `json:"started_unix_nano"`
	AdminAddressPath string        `json:"admin_address_path"`
	Snapshot         string        `json:"snapshot"`
	Outputs          []OutputState `json:"outputs"`
}

// OutputState is the read end of a pipe an Envoy writes its output to,
// kept open across the exec.
type OutputState struct {
	Stream string `json:"stream"` // "stdout" or "stderr"
	FD     int    `json:"fd"`
}

// Inheritable clears (on) or sets (off) close-on-exec on a file or socket,
// without changing its blocking mode (File.Fd would), and returns its fd.
func Inheritable(f syscall.Conn, on bool) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var ferr error
	err = rc.Control(func(u uintptr) {
		fd = int(u)
		flag := unix.FD_CLOEXEC
		if on {
			flag = 0
		}
		_, ferr = unix.FcntlInt(u, unix.F_SETFD, flag)
	})
	return fd, errors.Join(err, ferr)
}
