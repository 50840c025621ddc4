//go:build linux

// Package sockdiag lists the TCP sockets of the caller's network namespace in chosen states,
// from the kernel's sock_diag netlink interface (NETLINK_SOCK_DIAG, as ss(8) reads them).
//
// Unlike /proc/net/tcp, which the kernel renders as text for every socket of the namespace,
// a dump asks only for the states it names: a dump of established connections does not walk
// the listening sockets at all, so its cost follows the connections, not the listeners.
package sockdiag

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// TCP states (include/net/tcp_states.h), as bits of a States mask.
const (
	Established = 1 << 1
	CloseWait   = 1 << 8
	Listen      = 1 << 10
)

// Socket is one TCP socket of the dump.
type Socket struct {
	Local netip.AddrPort // IPv4-mapped IPv6 addresses unmapped
	State int            // a TCP state number: 1 established, 8 close-wait, 10 listen
	Inode uint64         // 0 for a connection still waiting in a listener's accept queue
}

// Sizes of the kernel's structures (include/uapi/linux/inet_diag.h).
const (
	sizeofSockID = 48 // inet_diag_sockid: sport, dport, src[4], dst[4], if, cookie[2]
	sizeofReq    = 8 + sizeofSockID
	sizeofMsg    = 4 + sizeofSockID + 20
)

// Dump returns the TCP sockets, IPv4 and IPv6, of the caller's network namespace whose state is
// in states (a mask of Established, CloseWait, Listen). It fails when the netlink socket cannot
// be opened (for one, a unit whose RestrictAddressFamilies= leaves out AF_NETLINK).
func Dump(states uint32) ([]Socket, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("sock_diag netlink socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("sock_diag bind: %w", err)
	}
	var out []Socket
	for i, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		got, err := dump(fd, uint32(i+1), family, states)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	return out, nil
}

// dump sends one SOCK_DIAG_BY_FAMILY dump request and reads its answer to NLMSG_DONE.
func dump(fd int, seq uint32, family uint8, states uint32) ([]Socket, error) {
	req := make([]byte, syscall.NLMSG_HDRLEN+sizeofReq)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	binary.NativeEndian.PutUint32(req[8:], seq)
	body := req[syscall.NLMSG_HDRLEN:]
	body[0] = family
	body[1] = unix.IPPROTO_TCP
	binary.NativeEndian.PutUint32(body[4:], states)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("sock_diag request: %w", err)
	}
	var out []Socket
	buf := make([]byte, 64<<10)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("sock_diag answer: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return nil, fmt.Errorf("sock_diag answer: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != seq {
				continue
			}
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return out, nil
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if errno := -int32(binary.NativeEndian.Uint32(m.Data)); errno != 0 {
						return nil, fmt.Errorf("sock_diag: %w", os.NewSyscallError("dump", syscall.Errno(errno)))
					}
				}
				return nil, errors.New("sock_diag: malformed error message")
			case unix.SOCK_DIAG_BY_FAMILY:
				s, err := parseMsg(m.Data)
				if err != nil {
					return nil, err
				}
				out = append(out, s)
			}
		}
	}
}

// parseMsg decodes one inet_diag_msg.
func parseMsg(b []byte) (Socket, error) {
	if len(b) < sizeofMsg {
		return Socket{}, fmt.Errorf("sock_diag: a message of %d bytes, want at least %d", len(b), sizeofMsg)
	}
	id := b[4 : 4+sizeofSockID]
	port := binary.BigEndian.Uint16(id[0:])
	var addr netip.Addr
	switch b[0] {
	case unix.AF_INET:
		addr = netip.AddrFrom4([4]byte(id[4:8]))
	case unix.AF_INET6:
		addr = netip.AddrFrom16([16]byte(id[4:20])).Unmap()
	default:
		return Socket{}, fmt.Errorf("sock_diag: address family %d", b[0])
	}
	inode := binary.NativeEndian.Uint32(b[4+sizeofSockID+16:])
	return Socket{Local: netip.AddrPortFrom(addr, port), State: int(b[1]), Inode: uint64(inode)}, nil
}
