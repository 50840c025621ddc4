//go:build linux

// What an agent killed with SIGKILL leaves in its run folder and in
// /dev/shm, cleared before the next one starts Envoy.

package envoy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// leftoverPatterns are the run folder's files that belong to one agent's
// Envoys: bootstrap copies, admin address files, hot-restart sockets, and
// the state file of a live upgrade that never completed.
var leftoverPatterns = []string{"epoch-*-*", "admin-address-epoch-*", hotRestartSocketName + "_*", "handover-*.json"}

// clearLeftovers runs before a fresh epoch 0, once the agent owns the run
// folder (no other agent serves its control socket). An agent killed with
// SIGKILL (systemd's KillMode=mixed kills its Envoys too) leaves its files
// there and Envoy's shared memory in /dev/shm; epoch 0 would fail on both
// ("file exists"). It refuses to touch them while an Envoy of that agent
// still runs (one of its hot-restart sockets answers), and reports a
// shared memory region that another user made or that a live process
// maps: Envoy would panic on it.
func (e *Envoy) clearLeftovers() error {
	cfg := e.config()
	if e.hotRestartSocket != "" {
		if sock, alive := HotRestartSocketBound(e.hotRestartSocket, cfg.BaseID); alive {
			return fmt.Errorf("an Envoy of an earlier agent of this run folder still runs (its hot-restart socket %s answers): stop it before starting the agent again", sock)
		}
	}
	if !e.ownRunDir {
		for _, pattern := range leftoverPatterns {
			matches, _ := filepath.Glob(filepath.Join(e.runDir, pattern))
			for _, m := range matches {
				if err := os.Remove(m); err != nil && !errors.Is(err, os.ErrNotExist) {
					return fmt.Errorf("remove %s, left by an earlier agent of this run folder: %w", m, err)
				}
				e.log.Infof("removed %s, left by an earlier agent of this run folder", m)
			}
		}
	}
	if cfg.DisableHotRestart {
		return nil
	}
	return e.clearSharedMemory(cfg.BaseID)
}

// clearSharedMemory removes the base id's shared memory region when the
// agent's user made it and no process maps it; it fails, naming who, when
// Envoy could not start on it.
func (e *Envoy) clearSharedMemory(baseID uint32) error {
	path := shmPath(baseID)
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("envoy's hot-restart shared memory: %w", err)
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	if st != nil && int(st.Uid) != os.Geteuid() {
		// Envoy cannot remove another user's file from /dev/shm (sticky)
		// and panics ("cannot open shared memory region ... File exists");
		// run by root, Envoy replaces it.
		if os.Geteuid() != 0 {
			return &SharedMemoryOwnerError{Path: path, BaseID: baseID, Uid: int(st.Uid), Mode: fi.Mode()}
		}
		e.log.Warnf("%s belongs to uid %d (%s), not to the agent; Envoy (run by root) replaces it", path, st.Uid, userName(int(st.Uid)))
		return nil
	}
	if pid := processMapping(path); pid > 0 {
		return fmt.Errorf("%s (base_id %d) is in use by pid %d, an Envoy that this agent did not start: give this agent another envoy.base_id", path, baseID, pid)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove envoy's hot-restart shared memory left by an earlier agent: %w", err)
	}
	e.log.Infof("removed %s, left by an earlier Envoy with base_id %d that no process maps", path, baseID)
	return nil
}

// SharedMemoryOwnerError is Envoy's shared memory region for the base id,
// made by another user before Envoy started: Envoy would panic on it.
type SharedMemoryOwnerError struct {
	Path   string
	BaseID uint32
	Uid    int
	Mode   os.FileMode
}

func (e *SharedMemoryOwnerError) Error() string {
	return fmt.Sprintf("%s, Envoy's hot-restart shared memory for base_id %d, already exists and belongs to uid %d (%s, mode %04o): Envoy cannot start on it; remove it (as root) or give this agent another envoy.base_id; under the packaged unit /dev/shm is the unit's own and nobody else can make it",
		e.Path, e.BaseID, e.Uid, userName(e.Uid), e.Mode.Perm())
}

// SharedMemoryOwner describes who owns the base id's shared memory region,
// "" when it does not exist.
func SharedMemoryOwner(baseID uint32) string {
	fi, err := os.Lstat(shmPath(baseID))
	if err != nil {
		return ""
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%s belongs to uid %d (%s)", shmPath(baseID), st.Uid, userName(int(st.Uid)))
}

func userName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return "no such user"
}

// processMapping returns a process that maps path (as /proc/PID/maps shows
// it), 0 when none that this agent may see does.
func processMapping(path string) int {
	entries, _ := os.ReadDir("/proc")
	want := []byte(" " + path)
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		f, err := os.Open(filepath.Join("/proc", ent.Name(), "maps"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		found := false
		for sc.Scan() {
			if bytes.HasSuffix(sc.Bytes(), want) || bytes.Contains(sc.Bytes(), append(want, ' ')) {
				found = true
				break
			}
		}
		f.Close()
		if found {
			return pid
		}
	}
	return 0
}
