//go:build linux

package service

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

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

func untrusted(format string, args ...any) error {
	return &UntrustedControlError{Reason: fmt.Sprintf(format, args...)}
}

// controlDir is what the control socket's folder says about who may serve
// the socket.
type controlDir struct {
	path  string
	owner uint32
}

// checkControlDir checks the folder of the control socket sock. A folder
// that does not exist yet is checked where the agent would make it: the
// nearest existing folder above must be one others cannot write.
func checkControlDir(sock string) (controlDir, error) {
	dir := filepath.Dir(sock)
	st, err := lstatDir(dir)
	if os.IsNotExist(err) {
		parent := filepath.Dir(dir)
		for parent != filepath.Dir(parent) {
			if _, perr := os.Lstat(parent); perr == nil {
				break
			}
			parent = filepath.Dir(parent)
		}
		pst, perr := lstatDir(parent)
		if perr != nil {
			return controlDir{}, perr
		}
		if pst.Mode&0o022 != 0 {
			return controlDir{}, untrusted("%s does not exist, and %s, where the agent would make it, is writable by its group or by others (mode %04o): any local user could make it first and serve a fake agent there; put the socket in a folder only the service can write, such as /run/envoy-agent",
				dir, parent, pst.Mode&0o7777)
		}
		return controlDir{path: dir, owner: uint32(os.Geteuid())}, nil
	}
	if err != nil {
		return controlDir{}, err
	}
	if st.Mode&0o022 != 0 {
		return controlDir{}, untrusted("the control socket's folder %s is writable by its group or by others (mode %04o): any local user could put a fake agent there; make it 0750 or 0700", dir, st.Mode&0o7777)
	}
	if st.Uid != 0 {
		parent := filepath.Dir(dir)
		pst, err := lstatDir(parent)
		if err != nil {
			return controlDir{}, err
		}
		if pst.Uid != 0 || pst.Mode&0o022 != 0 {
			return controlDir{}, untrusted("the control socket's folder %s belongs to uid %d and is in %s, which %s: any local user could have made it and serve a fake agent there; put the socket in a folder only root can create, such as /run/envoy-agent",
				dir, st.Uid, parent, notRootOnly(pst))
		}
	}
	return controlDir{path: dir, owner: st.Uid}, nil
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

// believes reports whether a client believes an answer on the socket in d
// from server: root, the client's own user, or the owner of the folder (the
// service user, whom root gave it).
func (d controlDir) believes(server peerCred) error {
	switch server.UID {
	case 0, uint32(os.Geteuid()), d.owner:
		return nil
	}
	return untrusted("the process serving it (pid %d) runs as uid %d, neither root, you (uid %d) nor the owner of %s (uid %d): not the agent, not believed",
		server.Pid, server.UID, os.Geteuid(), d.path, d.owner)
}

// checkControlSocketDir adds a problem when the control socket's folder would
// let another user serve a fake agent (checkControlDir).
func (c *Config) checkControlSocketDir(ps *problems) {
	key := "agent.control_socket"
	if c.Agent.ControlSocket == "" {
		key = "agent.run_dir"
	}
	if _, err := checkControlDir(c.controlSocket()); err != nil {
		ps.add(key, "%v", err)
	}
}
