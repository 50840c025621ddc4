//go:build linux

// What an agent killed with SIGKILL leaves in its run folder and in
// /dev/shm, cleared before the next one starts Envoy.

package hostfiles

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// leftoverPatterns are the run folder's files that belong to one agent's
// Envoys: bootstrap copies, admin address files, hot-restart sockets, and
// the state file of a live upgrade that never completed, and the secrets
// (certificates and keys) served to Envoy from files (envoy/certs).
var leftoverPatterns = []string{"epoch-*-*", "admin-address-epoch-*", hotRestartSocketName + "_*", "handover-*.json", "sds-*.yaml", ".sds-*.tmp"}

// Leftovers names what one agent's Envoys keep on the host.
type Leftovers struct {
	RunDir string
	// Temporary is set when RunDir is a fresh folder the agent made:
	// nothing can be left in it.
	Temporary bool
	// HotRestartSocket is Envoy's --socket-path, "" with its abstract
	// sockets.
	HotRestartSocket string
	BaseID           uint32
	// SharedMemory is set when Envoy keeps shared memory (hot restart is
	// on).
	SharedMemory bool
}

// ClearLeftovers runs before a fresh epoch 0, once the agent owns the run
// folder (no other agent serves its control socket). An agent killed with
// SIGKILL (systemd's KillMode=mixed kills its Envoys too) leaves its files
// there and Envoy's shared memory in /dev/shm; epoch 0 would fail on both
// ("file exists"). It refuses to touch them while an Envoy of that agent
// still runs (one of its hot-restart sockets answers), and reports a
// shared memory region that another user made or that a live process
// maps: Envoy would panic on it.
func ClearLeftovers(l Leftovers, log Logger) error {
	if l.HotRestartSocket != "" {
		if sock, alive := HotRestartSocketBound(l.HotRestartSocket, l.BaseID); alive {
			return fmt.Errorf("an Envoy of an earlier agent of this run folder still runs (its hot-restart socket %s answers): stop it before starting the agent again", sock)
		}
	}
	if !l.Temporary {
		for _, pattern := range leftoverPatterns {
			matches, _ := filepath.Glob(filepath.Join(l.RunDir, pattern))
			for _, m := range matches {
				if err := os.RemoveAll(m); err != nil && !errors.Is(err, os.ErrNotExist) { // a folder: an epoch's resource files
					return fmt.Errorf("remove %s, left by an earlier agent of this run folder: %w", m, err)
				}
				log.Infof("removed %s, left by an earlier agent of this run folder", m)
			}
		}
	}
	if !l.SharedMemory {
		return nil
	}
	return clearSharedMemory(l.BaseID, log)
}

// RemoveRunFiles removes the files of leftoverPatterns from runDir: a stop's
// clean-up once no epoch is left. What it cannot remove, the next start
// clears (ClearLeftovers).
func RemoveRunFiles(runDir string) {
	for _, pattern := range leftoverPatterns {
		matches, _ := filepath.Glob(filepath.Join(runDir, pattern))
		for _, m := range matches {
			_ = os.RemoveAll(m)
		}
	}
}
