//go:build linux

package hostfiles

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// CheckRunDir refuses a run folder that anyone but the agent's user (or
// root) could change: one writable by its group or by others, or owned by
// another user. The folder holds the bootstrap copies Envoy runs, the files
// Envoy writes its admin address to and its admin socket; whoever can write
// there could swap them. A symbolic link as the folder itself is refused
// too.
func CheckRunDir(dir string) error {
	fi, err := CheckRunDirMode(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return errors.New("cannot read the owner of " + dir)
	}
	if uid := uint32(os.Geteuid()); st.Uid != uid && st.Uid != 0 {
		return fmt.Errorf("%s belongs to uid %d, not to the agent's user (uid %d) or root", dir, st.Uid, uid)
	}
	return nil
}

// CheckRunDirMode is the part of CheckRunDir that does not depend on who
// asks: a directory, not a link, that neither its group nor others can
// write. `envoy-agent validate` run by root checks this much of a run
// folder the service user owns; the agent checks the owner too when it runs.
func CheckRunDirMode(dir string) (os.FileInfo, error) {
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory (%s)", dir, fi.Mode().Type())
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return nil, fmt.Errorf("%s is writable by its group or by others (mode %04o); make it 0750 or 0700", dir, perm)
	}
	return fi, nil
}
