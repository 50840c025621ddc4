//go:build linux

package config

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/envoy-agent/envoy-agent/internal/filetrust"
	"github.com/envoy-agent/envoy-agent/internal/hostfiles"
)

// DefaultRunDir is agent.run_dir when the file does not set it: the
// folder the packaged unit's RuntimeDirectory=envoy-agent creates. A fixed
// default (not $RUNTIME_DIRECTORY) lets `envoy-agent reload` find the
// control socket from the configuration file alone, in any shell.
const DefaultRunDir = "/run/envoy-agent"

// controlSocketName is the control socket's name in run_dir when
// agent.control_socket is not set.
const controlSocketName = "control.sock"

// maxUnixPath is the longest path a unix socket address holds (sun_path is
// 108 bytes with its terminating NUL).
const maxUnixPath = 107

// ControlSocketPath is the path of the agent's control socket:
// agent.control_socket, else <run_dir>/control.sock.
func (c *Config) ControlSocketPath() string {
	if c.Agent.ControlSocket != "" {
		return c.Agent.ControlSocket
	}
	return filepath.Join(c.RunDir(), controlSocketName)
}

// checkControlSocket checks the control socket's path and folder; runDirOK
// false: run_dir was refused already, and a socket in it is not refused
// twice for the same reason.
func (c *Config) checkControlSocket(ps *problems, runDirOK bool) {
	key := "agent.control_socket"
	if c.Agent.ControlSocket == "" {
		key = "agent.run_dir"
		if hostfiles.CheckHotRestartSocketPath(c.RunDir(), c.Envoy.BaseID) != nil {
			return // run_dir is too long already for Envoy's longer socket names: said once
		}
	}
	if !runDirOK && filepath.Dir(c.ControlSocketPath()) == filepath.Clean(c.RunDir()) {
		return
	}
	if p := c.ControlSocketPath(); len(p) > maxUnixPath {
		ps.add(key, "the control socket %s is %d bytes long; a unix socket path holds at most %d", p, len(p), maxUnixPath)
	}
	c.checkControlSocketDir(ps)
}

// The control socket's folder decides who may serve it. A local user who
// can make that folder (or write into it) can serve a fake agent there
// first: the agent would then fail to start, and root's `envoy-agent
// reload` would print the fake's answer. So the folder must be one that
// neither its group nor others can write (as run_dir), and a folder owned by
// a user other than root must sit in a folder only root can write (as
// /run/envoy-agent, which systemd makes for the service user in /run):
// anywhere else (in /tmp, say) any local user could have made it.

// UntrustedControlError is a control socket the client does not believe:
// its folder could be another user's doing, or another user serves it.
type UntrustedControlError struct {
	Reason string
}

func (e *UntrustedControlError) Error() string { return e.Reason }

// Untrusted is an *UntrustedControlError.
func Untrusted(format string, args ...any) error {
	return &UntrustedControlError{Reason: fmt.Sprintf(format, args...)}
}

// ControlDir is what the control socket's folder says about who may serve
// the socket.
type ControlDir struct {
	// Path is the folder.
	Path string
	// Owner is its owner: the one user besides root and the caller whose
	// server a client believes.
	Owner uint32
}

// CheckControlDir checks the folder of the control socket sock. A folder
// that does not exist yet is checked where the agent would make it: the
// nearest existing folder above must be one others cannot write. Every
// folder above it is checked too (filetrust): whoever can replace one of
// them can put a folder of their own, and a fake agent, in its place.
func CheckControlDir(sock string) (ControlDir, error) {
	dir := filepath.Dir(sock)
	st, err := lstatDir(dir)
	if os.IsNotExist(err) {
		if err := filetrust.Default().CheckFolder(dir, false); err != nil {
			return ControlDir{}, Untrusted("the control socket's folder: %v, and serve a fake agent there; put the socket in a folder only the service can write, such as /run/envoy-agent", err)
		}
		return ControlDir{Path: dir, Owner: uint32(os.Geteuid())}, nil
	}
	if err != nil {
		return ControlDir{}, err
	}
	if st.Mode&0o022 != 0 {
		return ControlDir{}, Untrusted("the control socket's folder %s is writable by its group or by others (mode %04o): any local user could put a fake agent there; make it 0750 or 0700", dir, st.Mode&0o7777)
	}
	if st.Uid != 0 {
		parent := filepath.Dir(dir)
		pst, err := lstatDir(parent)
		if err != nil {
			return ControlDir{}, err
		}
		if pst.Uid != 0 || pst.Mode&0o022 != 0 {
			return ControlDir{}, Untrusted("the control socket's folder %s belongs to uid %d and is in %s, which %s: any local user could have made it and serve a fake agent there; put the socket in a folder only root can create, such as /run/envoy-agent",
				dir, st.Uid, parent, notRootOnly(pst))
		}
	}
	// Its owner is judged above (root, or a user in a folder only root can
	// write); every folder above it, here.
	if err := filetrust.Default().CheckFolder(dir, false); err != nil {
		return ControlDir{}, Untrusted("the control socket's folder: %v: they could put a folder of their own there, and serve a fake agent in it; put the socket in a folder only root and the service can write, such as /run/envoy-agent", err)
	}
	return ControlDir{Path: dir, Owner: st.Uid}, nil
}

// lstatDir is the Stat_t of dir, which must be a folder and not a link.
func lstatDir(dir string) (*syscall.Stat_t, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(dir, &st); err != nil {
		return nil, &os.PathError{Op: "lstat", Path: dir, Err: err}
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return nil, fmt.Errorf("%s is not a folder", dir)
	}
	return &st, nil
}

func notRootOnly(st *syscall.Stat_t) string {
	if st.Uid != 0 {
		return fmt.Sprintf("belongs to uid %d", st.Uid)
	}
	return fmt.Sprintf("is writable by its group or by others (mode %04o)", st.Mode&0o7777)
}

// checkControlSocketDir adds a problem when the control socket's folder would
// let another user serve a fake agent (CheckControlDir).
func (c *Config) checkControlSocketDir(ps *problems) {
	key := "agent.control_socket"
	if c.Agent.ControlSocket == "" {
		key = "agent.run_dir"
	}
	if _, err := CheckControlDir(c.ControlSocketPath()); err != nil {
		ps.add(key, "%v", err)
	}
}
