//go:build linux

package safefile

import (
	"os"

	"golang.org/x/sys/unix"
)

// Identity tells one file at a path, or one version of it, from another:
// its device and inode, size, and modification and change times. Writing a
// file changes its size or its times; renaming another file over it
// changes its inode. Identities compare with ==.
type Identity struct {
	dev, ino     uint64
	size         int64
	mtime, ctime unix.Timespec
}

// Identify stats path, following links (as exec and open do).
func Identify(path string) (Identity, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return Identity{}, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	return identity(&st), nil
}

func identity(st *unix.Stat_t) Identity {
	return Identity{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
}

// SameInode reports whether i and o are the same file (device and inode),
// written or not since.
func (i Identity) SameInode(o Identity) bool { return i.dev == o.dev && i.ino == o.ino }
