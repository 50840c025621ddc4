package xds

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/credentials"
)

// peerCreds is the gRPC server's handshake on the unix socket: it reads the
// connecting process's credentials (SO_PEERCRED) and refuses any user but
// the agent's own and root (the socket is 0600 already: this holds even if
// the folder's mode was changed behind the agent).
type peerCreds struct{}

// peer is who connected: Envoy's pid, for the status.
type peer struct {
	credentials.CommonAuthInfo
	pid int32
	uid uint32
}

func (peer) AuthType() string { return "peercred" }

func (peerCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil, nil, errors.New("xds: not a unix socket")
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil, nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, nil, err
	}
	if cerr != nil {
		return nil, nil, fmt.Errorf("xds: SO_PEERCRED: %w", cerr)
	}
	if cred.Uid != 0 && int(cred.Uid) != os.Geteuid() {
		return nil, nil, fmt.Errorf("xds: refused a connection from uid %d (pid %d)", cred.Uid, cred.Pid)
	}
	return conn, peer{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}, pid: cred.Pid, uid: cred.Uid}, nil
}

func (peerCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("xds: server-side credentials only")
}

func (peerCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "peercred"}
}

func (peerCreds) Clone() credentials.TransportCredentials { return peerCreds{} }

func (peerCreds) OverrideServerName(string) error { return nil }
