//go:build linux

package safefile

import (
	"os"
	"syscall"
)

// CreatePrivate creates the file at path with data in it, private to the
// agent's user (0600: it may hold secrets), exclusively and never through a
// symbolic link: it fails when anything stands at path already, so nobody
// can have prepared the file or a link for the agent to write through. A
// file it could not write whole is removed.
func CreatePrivate(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		_ = os.Remove(path)
		return err
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(path)
		return err
	}
	return nil
}
