//go:build linux

package claims

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/envoy-agent/envoy-agent/envoy/reexec"
)

// FD is a locked claim file handed over across a live upgrade: the lock
// belongs to the open file, which the exec keeps. It is part of the
// handover state (JSON).
type FD struct {
	Name string `json:"name"`
	FD   int    `json:"fd"`
}

// adoptClaim takes over a claim file inherited through the exec.
func adoptClaim(h FD) (*os.File, error) {
	f := os.NewFile(uintptr(h.FD), h.Name)
	if f == nil {
		return nil, fmt.Errorf("claim %s: bad inherited fd %d", h.Name, h.FD)
	}
	if _, err := reexec.Inheritable(f, false); err != nil {
		f.Close()
		return nil, fmt.Errorf("claim %s: inherited fd %d: %w", h.Name, h.FD, err)
	}
	return f, nil
}

// HandOver makes every claim file inheritable and lists them, for the
// handover state; undo makes them close-on-exec again (the exec failed).
func (c *Held) HandOver() (handed []FD, undo func(), err error) {
	undo = func() {
		for _, f := range c.files {
			_, _ = reexec.Inheritable(f, false)
		}
	}
	for _, f := range c.files {
		fd, err := reexec.Inheritable(f, true)
		if err != nil {
			undo()
			return nil, func() {}, fmt.Errorf("keep claim %s across the exec: %w", filepath.Base(f.Name()), err)
		}
		handed = append(handed, FD{Name: filepath.Base(f.Name()), FD: fd})
	}
	return handed, undo, nil
}
