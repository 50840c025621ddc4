//go:build linux

package control

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// peerCred is who is at the other end of a unix socket, as the kernel saw
// it when the connection was made (SO_PEERCRED and SO_PEERGROUPS): effective
// uid and gid, and the supplementary groups.
type peerCred struct {
	Pid    int32
	UID    uint32
	GID    uint32
	Groups []uint32
}

func (p peerCred) String() string {
	return fmt.Sprintf("pid %d uid %d gid %d", p.Pid, p.UID, p.GID)
}

// controlPolicy says who may use the control socket: root, the agent's own
// user (the service user), and any process whose effective or supplementary
// groups include the agent's own group (the service group). Everyone else
// is refused even if the socket's file mode was loosened by hand.
type controlPolicy struct {
	uid, gid uint32
}

func OwnPolicy() controlPolicy {
	return controlPolicy{uid: uint32(os.Geteuid()), gid: uint32(os.Getegid())}
}

// allows reports whether p may use the control socket, and why not.
func (c controlPolicy) allows(p peerCred) (bool, string) {
	switch {
	case p.UID == 0:
		return true, "root"
	case p.UID == c.uid:
		return true, "the service user"
	case p.GID == c.gid || slices.Contains(p.Groups, c.gid):
		return true, "the service group"
	}
	return false, fmt.Sprintf("uid %d is neither root, the service user (uid %d) nor in the service group (gid %d)", p.UID, c.uid, c.gid)
}

// readPeerCred reads the credentials of the peer of a unix socket connection.
func readPeerCred(conn *net.UnixConn) (peerCred, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return peerCred{}, fmt.Errorf("peer credentials: %w", err)
	}
	var pc peerCred
	var opErr error
	err = raw.Control(func(fd uintptr) {
		var uc *unix.Ucred
		uc, opErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if opErr != nil {
			return
		}
		pc = peerCred{Pid: uc.Pid, UID: uc.Uid, GID: uc.Gid}
		pc.Groups, opErr = peerGroups(int(fd))
	})
	if err == nil {
		err = opErr
	}
	if err != nil {
		return peerCred{}, fmt.Errorf("peer credentials: %w", err)
	}
	return pc, nil
}

// peerGroups is SO_PEERGROUPS (Linux 4.13): the peer's supplementary groups
// at connect time. golang.org/x/sys/unix has the constant but no wrapper
// that returns a []uint32, so this is the one raw getsockopt; ERANGE says
// the buffer was too small and how big it must be.
func peerGroups(fd int) ([]uint32, error) {
	groups := make([]uint32, 64)
	for range 2 {
		size := uint32(len(groups) * 4)
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&groups[0])), uintptr(unsafe.Pointer(&size)), 0)
		switch errno {
		case 0:
			return groups[:size/4], nil
		case unix.ERANGE:
			groups = make([]uint32, size/4+1)
		default:
			return nil, fmt.Errorf("SO_PEERGROUPS: %w", errno)
		}
	}
	return nil, errors.New("SO_PEERGROUPS: the group list keeps growing")
}

// peerCredKey is the context key of a control connection's peerCred.
type peerCredKey struct{}

// WithPeerCred is http.Server.ConnContext for the control socket: it reads
// the peer's credentials once per connection.
func WithPeerCred(ctx context.Context, c net.Conn) context.Context {
	for {
		w, ok := c.(interface{ Unwrap() net.Conn })
		if !ok {
			break
		}
		c = w.Unwrap()
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	pc, err := readPeerCred(uc)
	if err != nil {
		return ctx
	}
	return context.WithValue(ctx, peerCredKey{}, pc)
}

func peerFrom(ctx context.Context) (peerCred, bool) {
	pc, ok := ctx.Value(peerCredKey{}).(peerCred)
	return pc, ok
}

// isConnRefused reports whether err is a connect to a unix socket that no
// process listens on.
func isConnRefused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED)
}
