//go:build linux

// Envoy's hot-restart shared memory: its name, the INITIALIZING mark a
// failed epoch leaves in it, and its removal once no epoch is left.

package envoy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
)

// The shared memory Envoy's hot restart keeps, for HOT_RESTART_VERSION 11:
// size and version words first, flags last.
const (
	shmVersion         = 11
	shmFlagInitialzing = 1
)

// shmPath is Envoy's hot-restart shared memory for a base id (Envoy
// multiplies the base id by 10).
func shmPath(baseID uint32) string {
	return "/dev/shm/envoy_shared_memory_" + strconv.FormatUint(uint64(baseID)*10, 10)
}

// clearInitializingFlag clears the "initializing" flag that an epoch which
// died during its start leaves in the shared memory (Envoy clears it only
// once a new epoch has taken the listeners over). It touches only a region
// whose size and version words are those it knows. It reports whether the
// flag was set.
func clearInitializingFlag(baseID uint32) (bool, error) {
	path := shmPath(baseID)
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

// removeSharedMemory removes the hot-restart shared memory once no epoch is
// left (Envoy leaves it behind).
func removeSharedMemory(baseID uint32) error {
	if err := os.Remove(shmPath(baseID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
