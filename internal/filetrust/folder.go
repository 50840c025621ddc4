//go:build linux

package filetrust

import (
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// CheckFolder judges a folder the agent keeps its own files in (the run
// folder, a socket's folder, the claims folder): an *Error when anyone but
// the trusted users can write in it, or replace it or any folder above it,
// a *WalkError when it cannot be walked or is not a folder. A folder that
// does not exist yet is judged where it would be made: the nearest folder
// above it that exists must be one nobody else can write in, else anyone
// could make it first (an *Error with What "make in").
//
// With judgeOwner false, the folder's own owner is not judged (its mode and
// every folder above it are): root validating a configuration for the
// service's user, who owns the folder systemd made for it and whom root
// cannot name; the agent judges the owner when it runs.
func (t *Trusted) CheckFolder(dir string, judgeOwner bool) error {
	r, err := resolveWith(&walk{t: t, orig: dir, ownerFree: !judgeOwner}, dir)
	if err == nil {
		r.File.Close()
		if r.Stat.Mode&unix.S_IFMT != unix.S_IFDIR {
			return &WalkError{Path: dir, At: r.Path, Err: unix.ENOTDIR}
		}
		return nil
	}
	if !errors.Is(err, unix.ENOENT) || !filepath.IsAbs(dir) {
		return err
	}
	for p := filepath.Dir(filepath.Clean(dir)); ; p = filepath.Dir(p) {
		r, perr := resolve(t, p)
		if perr == nil {
			r.File.Close()
			return nil // only the trusted can make it
		}
		var e *Error
		if errors.As(perr, &e) {
			if e.At == e.Path {
				return &Error{Path: dir, At: p, Who: e.Who, What: "make in"}
			}
			return fmt.Errorf("%s does not exist, and %w", dir, perr)
		}
		if !errors.Is(perr, unix.ENOENT) || p == "/" {
			return perr
		}
	}
}
