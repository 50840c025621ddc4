//go:build linux

package hostfiles

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/envoy-agent/envoy-agent/internal/filetrust"
)

// CheckRunDir refuses a folder the agent keeps its own files in (the run
// folder, the control and admin sockets' folders, the claims folder) that
// anyone but the agent's user (or root) could change: one writable by its
// group or by others, one owned by another user, or one that anyone else
// could replace, or make first, through a folder above it (every folder up
// to /, links followed as the kernel does: filetrust). The run folder holds
// the bootstrap copies Envoy runs, the files Envoy writes its admin address
// to and its admin socket; whoever can write there could swap them. A
// symbolic link as the folder itself is refused too.
func CheckRunDir(dir string) error {
	fi, err := folderMode(dir)
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
	return filetrust.Default().CheckFolder(dir, true)
}

// CheckRunDirMode is the part of CheckRunDir that does not depend on who
// owns the folder: a directory, not a link, that neither its group nor
// others can write, and that nobody but root and the agent's user can
// replace through a folder above it. `envoy-agent validate` run by root
// checks this much of a run folder the service user owns; the agent checks
// the owner too when it runs.
func CheckRunDirMode(dir string) (os.FileInfo, error) {
	fi, err := folderMode(dir)
	if err != nil {
		return nil, err
	}
	if err := filetrust.Default().CheckFolder(dir, false); err != nil {
		return nil, err
	}
	return fi, nil
}

// folderMode is a directory, not a link, that neither its group nor others
// can write.
func folderMode(dir string) (os.FileInfo, error) {
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory (%s)", dir, fi.Mode().Type())
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			perm = os.FileMode(st.Mode & 0o7777) // with the sticky bit, as ls shows it
		}
		return nil, fmt.Errorf("%s is writable by its group or by others (mode %04o)", dir, perm)
	}
	return fi, nil
}

// CheckNewRunDir is CheckRunDir for a folder the agent is about to make
// when it does not exist: nobody but root and the agent's user may be able
// to make it first (filetrust.CheckFolder), nor replace a folder above it.
// An existing folder gets CheckRunDir (judgeOwner) or CheckRunDirMode.
func CheckNewRunDir(dir string, judgeOwner bool) error {
	if _, err := os.Lstat(dir); err == nil {
		if judgeOwner {
			return CheckRunDir(dir)
		}
		_, err := CheckRunDirMode(dir)
		return err
	}
	return filetrust.Default().CheckFolder(dir, judgeOwner)
}
