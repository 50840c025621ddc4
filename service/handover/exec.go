//go:build linux

package handover

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/envoy-agent/envoy-agent/envoy/reexec"
)

// execFDEnv names the fd of the binary a live upgrade executed, left open
// across the exec; the new agent closes it (CloseExecFD).
const execFDEnv = "ENVOY_AGENT_EXEC_FD"

// CloseExecFD closes the fd of the binary the agent was re-executed from
// ($ENVOY_AGENT_EXEC_FD), if any, so that Envoys forked later do not
// inherit it, and gives the process back its command name. The new agent
// calls it first thing.
func CloseExecFD() {
	if v := os.Getenv(execFDEnv); v != "" {
		if fd, err := strconv.Atoi(v); err == nil && fd > 2 {
			_ = unix.Close(fd)
		}
		_ = os.Unsetenv(execFDEnv)
		restoreComm()
	}
}

// commMax is the longest command name the kernel keeps (TASK_COMM_LEN 16,
// less the terminating NUL).
const commMax = 15

// restoreComm sets the process's command name (/proc/PID/comm, what
// `pgrep -x` and `ps -C` match) back to its argv[0]'s base name. The kernel
// names a process after the base name of the path it was executed by, and a
// live upgrade executes /proc/self/fd/N: without this the agent's name
// becomes "N" and `pgrep -x envoy-agent` no longer finds it. Writing
// /proc/self/comm names the main thread (the process), whichever thread
// writes.
func restoreComm() {
	if len(os.Args) == 0 || os.Args[0] == "" {
		return
	}
	name := filepath.Base(os.Args[0])
	if len(name) > commMax {
		name = name[:commMax]
	}
	_ = os.WriteFile("/proc/self/comm", []byte(name), 0)
}

// InheritBinary keeps the new binary's file, opened before it was probed,
// open across the exec, blocking, and returns its fd: the fd probed is the
// file run, and a script's interpreter reads it by /proc/self/fd/N. undo
// makes it close-on-exec again (the exec failed); it is nil when err is
// set.
func InheritBinary(bin *os.File) (fd int, undo func(), err error) {
	fd = int(bin.Fd())
	if err := unix.SetNonblock(fd, false); err != nil {
		return -1, nil, fmt.Errorf("the new binary's fd: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
		return -1, nil, fmt.Errorf("the new binary's fd: %w", err)
	}
	return fd, func() { _, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC) }, nil
}

// Exec re-executes this process, on the thread that forks every Envoy
// (envoy/reexec), into the binary open at binFD (InheritBinary), with the
// same arguments and the state file at statePath handed over. It returns
// only when the exec failed.
func Exec(binFD int, statePath string) error {
	return reexec.ExecOnForkerThread(fmt.Sprintf("/proc/self/fd/%d", binFD), os.Args, execEnv(os.Environ(), binFD, statePath))
}

// execEnv is the new agent's environment: environ, less any handover
// variables of its own, with the state file and the binary's fd named.
func execEnv(environ []string, binFD int, statePath string) []string {
	env := []string{stateEnv + "=" + statePath}
	for _, kv := range environ {
		if !strings.HasPrefix(kv, stateEnv+"=") && !strings.HasPrefix(kv, execFDEnv+"=") {
			env = append(env, kv)
		}
	}
	return append(env, execFDEnv+"="+strconv.Itoa(binFD))
}
