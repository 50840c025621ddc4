//go:build linux

package sockdiag

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// socketInode reads the inode of the socket file f from /proc/self/fd.
func socketInode(t *testing.T, f *os.File) uint64 {
	t.Helper()
	link, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	s, ok := strings.CutPrefix(link, "socket:[")
	if !ok {
		t.Fatalf("fd link %q is not a socket", link)
	}
	n, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// find returns the sockets of the dump with local address a.
func find(all []Socket, a netip.AddrPort) []Socket {
	var out []Socket
	for _, s := range all {
		if s.Local == a {
			out = append(out, s)
		}
	}
	return out
}

func TestDump(t *testing.T) {
	for _, network := range []string{"tcp4", "tcp6"} {
		t.Run(network, func(t *testing.T) {
			host := "127.0.0.1"
			if network == "tcp6" {
				host = "[::1]"
			}
			ln, err := net.Listen(network, host+":0")
			if err != nil {
				t.Skipf("no %s loopback: %v", network, err)
			}
			defer ln.Close()
			lf, err := ln.(*net.TCPListener).File()
			if err != nil {
				t.Fatal(err)
			}
			defer lf.Close()
			client, err := net.Dial(network, ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			server, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer server.Close()
			sf, err := server.(*net.TCPConn).File()
			if err != nil {
				t.Fatal(err)
			}
			defer sf.Close()
			addr := netip.MustParseAddrPort(ln.Addr().String())

			listening, err := Dump(Listen)
			if err != nil {
				t.Fatal(err)
			}
			got := find(listening, addr)
			if len(got) != 1 || got[0].State != 10 || got[0].Inode != socketInode(t, lf) {
				t.Errorf("listening sockets on %s: %+v, want one in state 10 with inode %d", addr, got, socketInode(t, lf))
			}

			conns, err := Dump(Established | CloseWait)
			if err != nil {
				t.Fatal(err)
			}
			got = find(conns, addr)
			if len(got) != 1 || got[0].State != 1 || got[0].Inode != socketInode(t, sf) {
				t.Errorf("connections on %s: %+v, want the accepted one (state 1, inode %d), not the listener", addr, got, socketInode(t, sf))
			}
			clientAddr := netip.MustParseAddrPort(client.LocalAddr().String())
			if len(find(conns, clientAddr)) != 1 {
				t.Errorf("the client's end %s is missing from the established sockets", clientAddr)
			}

			// The peer closes: the accepted socket is in close-wait until the server closes it.
			client.Close()
			if err := waitState(addr, 8); err != nil {
				t.Error(err)
			}
		})
	}
}

// waitState polls the dump until the connection on addr is in state, for at most 5 s.
func waitState(addr netip.AddrPort, state int) error {
	var last []Socket
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		all, err := Dump(Established | CloseWait)
		if err != nil {
			return err
		}
		if last = find(all, addr); len(last) == 1 && last[0].State == state {
			return nil
		}
	}
	return fmt.Errorf("connections on %s: %+v, want one in state %d", addr, last, state)
}
