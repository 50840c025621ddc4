//go:build linux

// Envoy's hot-restart shared memory: its name, the INITIALIZING mark a
// failed epoch leaves in it, its removal once no epoch is left, and who
// made one that stands in the way of a start.

package hostfiles

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// The shared memory Envoy's hot restart keeps, for HOT_RESTART_VERSION 11:
// size and version words first, flags last.
const (
	shmVersion         = 11
	shmFlagInitialzing = 1
)

// SharedMemoryPath is Envoy's hot-restart shared memory for a base id
// (Envoy multiplies the base id by BaseIDScale; its log names the region
// without /dev/shm, as shm_open(3) takes it).
func SharedMemoryPath(baseID uint32) string {
	return "/dev/shm/envoy_shared_memory_" + strconv.FormatUint(uint64(baseID)*BaseIDScale, 10)
}

// ClearInitializingFlag clears the "initializing" flag that an epoch which
// died during its start leaves in the shared memory (Envoy clears it only
// once a new epoch has taken the listeners over). It touches only a region
// whose size and version words are those it knows. It reports whether the
// flag was set.
func ClearInitializingFlag(baseID uint32) (bool, error) {
	path := SharedMemoryPath(baseID)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return false, fmt.Errorf("open hot-restart shared memory: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("hot-restart shared memory: %w", err)
	}
	size := fi.Size()
	head := make([]byte, 16)
	if _, err := f.ReadAt(head, 0); err != nil {
		return false, fmt.Errorf("read hot-restart shared memory: %w", err)
	}
	if got := binary.LittleEndian.Uint64(head); int64(got) != size || size < 24 {
		return false, fmt.Errorf("%s: size word %d does not match the file size %d; not touching it", path, got, size)
	}
	if v := binary.LittleEndian.Uint64(head[8:]); v != shmVersion {
		return false, fmt.Errorf("%s: hot-restart version %d, not %d; not touching it", path, v, shmVersion)
	}
	flags := make([]byte, 8)
	if _, err := f.ReadAt(flags, size-8); err != nil {
		return false, fmt.Errorf("read hot-restart flags: %w", err)
	}
	v := binary.LittleEndian.Uint64(flags)
	if v&shmFlagInitialzing == 0 {
		return false, nil
	}
	binary.LittleEndian.PutUint64(flags, v&^shmFlagInitialzing)
	if _, err := f.WriteAt(flags, size-8); err != nil {
		return false, fmt.Errorf("clear hot-restart flag: %w", err)
	}
	return true, nil
}

// RemoveSharedMemory removes the hot-restart shared memory once no epoch is
// left (Envoy leaves it behind).
func RemoveSharedMemory(baseID uint32) error {
	if err := os.Remove(SharedMemoryPath(baseID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// clearSharedMemory removes the base id's shared memory region when the
// agent's user made it and no process maps it; it fails, naming who, when
// Envoy could not start on it.
func clearSharedMemory(baseID uint32, log Logger) error {
	path := SharedMemoryPath(baseID)
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
		log.Warnf("%s belongs to uid %d (%s), not to the agent; Envoy (run by root) replaces it", path, st.Uid, userName(int(st.Uid)))
		return nil
	}
	if pid := processMapping(path); pid > 0 {
		return fmt.Errorf("%s (Envoy's hot-restart shared memory for base_id %d) is mapped by %s, which this agent did not start: stop it, or give this agent another envoy.base_id", path, baseID, describeProcess(pid))
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove envoy's hot-restart shared memory left by an earlier agent: %w", err)
	}
	log.Infof("removed %s, left by an earlier Envoy with base_id %d that no process maps", path, baseID)
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
	mapped := "no process this agent may see maps it"
	if pid := processMapping(e.Path); pid > 0 {
		mapped = "mapped by " + describeProcess(pid)
	}
	return fmt.Sprintf("%s, Envoy's hot-restart shared memory for base_id %d, already exists and belongs to uid %d (%s, mode %04o; %s): Envoy cannot start on it; remove it (as root) or give this agent another envoy.base_id; under the packaged unit /dev/shm is the unit's own and nobody else can make it",
		e.Path, e.BaseID, e.Uid, userName(e.Uid), e.Mode.Perm(), mapped)
}

// describeProcess names a process by what the kernel says of it: "pid 42
// (envoy, uid 1001)".
func describeProcess(pid int) string {
	comm, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
	name := strings.TrimSpace(string(comm))
	if name == "" {
		name = "exited"
	}
	uid := "uid unknown"
	if fi, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			uid = fmt.Sprintf("uid %d", st.Uid)
		}
	}
	return fmt.Sprintf("pid %d (%s, %s)", pid, name, uid)
}

// SharedMemoryOwner describes who owns the base id's shared memory region,
// "" when it does not exist.
func SharedMemoryOwner(baseID uint32) string {
	fi, err := os.Lstat(SharedMemoryPath(baseID))
	if err != nil {
		return ""
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%s belongs to uid %d (%s)", SharedMemoryPath(baseID), st.Uid, userName(int(st.Uid)))
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
		maps, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "maps"))
		if err == nil && mapsNames(maps, want) {
			return pid
		}
	}
	return 0
}

// mapsNames reports whether a line of maps, a /proc/PID/maps, ends with
// want (" " and the path) or has it before a space (" (deleted)"): one
// search of the whole file, where a scan line by line cost the start of a
// small bootstrap a millisecond.
func mapsNames(maps, want []byte) bool {
	for rest := maps; ; {
		i := bytes.Index(rest, want)
		if i < 0 {
			return false
		}
		rest = rest[i+len(want):]
		if len(rest) == 0 || rest[0] == '\n' || rest[0] == ' ' {
			return true
		}
	}
}
