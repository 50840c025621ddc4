//go:build linux

package conncount

import (
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// A /proc/net/tcp as the kernel writes it: Envoy listening on 127.0.0.1:10000
// (inode 100) and on its admin port 15000 (inode 101); two connections it
// accepted on 10000 (inodes 200, 201; one in CLOSE_WAIT), one waiting in
// the accept queue (inode 0), one it closed (FIN_WAIT2, inode 0), one on
// the admin port (inode 202), its own upstream connection from an
// ephemeral port (inode 203), and a client's socket to 10000 (inode 300,
// another process).
const tcpTable = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:2710 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 100 1 0000000000000000 100 0 0 10 0
   1: 0100007F:3A98 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 101 1 0000000000000000 100 0 0 10 0
   2: 0100007F:2710 0100007F:C000 01 00000000:00000000 00:00000000 00000000  1000        0 200 1 0000000000000000 20 4 30 10 -1
   3: 0100007F:2710 0100007F:C001 08 00000000:00000000 00:00000000 00000000  1000        0 201 1 0000000000000000 20 4 30 10 -1
   4: 0100007F:2710 0100007F:C002 01 00000000:00000000 00:00000000 00000000  1000        0 0 1 0000000000000000 20 4 30 10 -1
   5: 0100007F:2710 0100007F:C003 05 00000000:00000000 00:00000000 00000000  1000        0 0 1 0000000000000000 20 4 30 10 -1
   6: 0100007F:3A98 0100007F:C004 01 00000000:00000000 00:00000000 00000000  1000        0 202 1 0000000000000000 20 4 30 10 -1
   7: 0100007F:C005 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 203 1 0000000000000000 20 4 30 10 -1
   8: 0100007F:C000 0100007F:2710 01 00000000:00000000 00:00000000 00000000  1000        0 300 1 0000000000000000 20 4 30 10 -1
`

func TestCountDownstream(t *testing.T) {
	entries, err := parseSocketTable(strings.NewReader(tcpTable))
	if err != nil || len(entries) != 9 {
		t.Fatalf("parsed %d entries, %v; want 9", len(entries), err)
	}
	epochA := map[uint64]bool{100: true, 101: true, 200: true, 202: true, 203: true}
	epochB := map[uint64]bool{100: true, 101: true, 201: true}
	owners := map[uint64]bool{}
	for _, m := range []map[uint64]bool{epochA, epochB} {
		for k := range m {
			owners[k] = true
		}
	}
	tests := []struct {
		name    string
		owners  map[uint64]bool
		counted map[uint64]bool
		want    int
	}{
		{"every epoch, accept queue included", owners, nil, 3},
		{"epoch A alone", owners, epochA, 1},
		{"epoch B alone (CLOSE_WAIT)", owners, epochB, 1},
		{"no listener of ours", map[uint64]bool{999: true}, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			listening := listenAddrs{}
			listening.update(entries, tt.owners, 15000)
			if got := countDownstream(entries, listening, inSet(tt.owners), tt.counted); got != tt.want {
				t.Errorf("got %d, want %d", got, tt.want)
			}
		})
	}
}

// The same table once Envoy's graceful drain has closed the listener on
// 10000 (lines 0 and 4 gone: the queued connection is reset with it): the
// two connections accepted on it still count, from the address seen
// listening before; once they are gone too, the address is forgotten.
func TestCountDownstreamAfterTheListenerClosed(t *testing.T) {
	entries, err := parseSocketTable(strings.NewReader(tcpTable))
	if err != nil {
		t.Fatal(err)
	}
	owners := map[uint64]bool{100: true, 101: true, 200: true, 201: true, 202: true, 203: true}
	listening := listenAddrs{}
	listening.update(entries, owners, 15000)
	var closed []socketEntry
	for _, s := range entries {
		if s.inode != 100 && !(s.inode == 0 && s.state == tcpEstablished) {
			closed = append(closed, s)
		}
	}
	listening.update(closed, owners, 15000)
	if got := countDownstream(closed, listening, inSet(owners), nil); got != 2 {
		t.Errorf("listener closed: got %d, want the 2 connections accepted on it", got)
	}
	if fresh := (listenAddrs{}); countDownstream(closed, fresh, inSet(owners), nil) != 0 {
		t.Errorf("an address never seen listening counted")
	}
	var drained []socketEntry
	for _, s := range closed {
		if s.inode != 200 && s.inode != 201 {
			drained = append(drained, s)
		}
	}
	listening.update(drained, owners, 15000)
	if len(listening) != 0 {
		t.Errorf("remembered %v after the last connection on it closed; want nothing", listening)
	}
}

func TestParseSocketTableRefusesGarbage(t *testing.T) {
	for _, text := range []string{
		"   0: 0100007F:2710 00000000:0000 0A\n",
		"   0: 0100007F 00000000:0000 0A 0 0 0 0 0 100\n",
		"   0: 0100007F:2710 00000000:0000 ZZ 0 0 0 0 0 100\n",
		"   0: 0100007F:2710 00000000:0000 0A 0 0 0 0 0 x\n",
	} {
		if _, err := parseSocketTable(strings.NewReader(text)); err == nil || !strings.HasPrefix(err.Error(), "line 1") {
			t.Errorf("%q: %v; want an error naming line 1", text, err)
		}
	}
}

// On the kernel's own table: a listener of this process and one
// connection accepted on it count as one downstream connection; the
// client's end of it, also this process's, does not. The test's own
// sockets are the owners (socketInodeOf), not the whole process's.
func TestCountDownstreamOnTheKernelsTable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Only the three sockets made here: other tests of this process may
	// hold listeners and connections of their own (and did: "2 connections
	// accepted", one of them another test's).
	mine := map[uint64]bool{}
	for _, conn := range []syscall.Conn{ln.(*net.TCPListener), c.(*net.TCPConn), s.(*net.TCPConn)} {
		mine[socketInodeOf(t, conn)] = true
	}
	entries, err := readSocketTable(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	listening := listenAddrs{}
	listening.update(entries, mine, 0)
	if got := countDownstream(entries, listening, inSet(mine), nil); got != 1 {
		t.Errorf("%d connections accepted on this process's listener, want 1", got)
	}
}

// The counter on this process's own sockets: a full count first, then
// quick ones while the connections stay as they were; a new connection
// (unknown to the last full count) and a zero each take a full count, so
// that no drain ever ends on a quick count. Without sock_diag (a sandbox
// that refuses AF_NETLINK) every count is a full one from /proc.
func TestDownstreamCounterQuickAndFull(t *testing.T) {
	// The counter counts every socket of the pids it is given, and the pid
	// here is this process: alone in a process of its own, nothing but
	// this test's sockets is counted.
	if !runAlone(t) {
		return
	}
	for _, tt := range []struct {
		name   string
		noDiag bool
		// full counts after each step: first, again, a new connection, all closed
		wantFull [4]int
	}{
		{"sock_diag", false, [4]int{1, 1, 2, 3}},
		{"/proc/net/tcp", true, [4]int{1, 2, 3, 4}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			var servers []net.Conn
			accept := func() {
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				s, err := ln.Accept()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				servers = append(servers, s)
			}
			c := New(nil)
			c.noDiag = tt.noDiag
			pids := []int{os.Getpid()}
			step := func(i, want int) {
				t.Helper()
				if n, err := c.Count(pids, 0); err != nil || n != want {
					t.Fatalf("step %d: %d, %v; want %d", i, n, err, want)
				}
				if got := c.FullCounts(); got != tt.wantFull[i] {
					t.Errorf("step %d: %d full counts so far, want %d", i, got, tt.wantFull[i])
				}
			}
			accept()
			step(0, 1)
			step(1, 1)
			accept()
			step(2, 2)
			for _, s := range servers {
				s.Close()
			}
			step(3, 0)
		})
	}
}

// inSet is membership in m, as countDownstream asks it.
func inSet(m map[uint64]bool) func(uint64) bool { return func(i uint64) bool { return m[i] } }

// socketInodeOf is the inode of conn's socket, as /proc/PID/fd and the
// kernel's socket tables name it.
func socketInodeOf(t *testing.T, conn syscall.Conn) uint64 {
	t.Helper()
	rc, err := conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	var statErr error
	if err := rc.Control(func(fd uintptr) { statErr = syscall.Fstat(int(fd), &st) }); err != nil {
		t.Fatal(err)
	}
	if statErr != nil {
		t.Fatal(statErr)
	}
	return st.Ino
}

// aloneEnv marks the child process in which runAlone runs one test.
const aloneEnv = "ENVOY_AGENT_TEST_ALONE"

// runAlone runs the calling test by itself in a new process of this test
// binary, for a test that reads state of the whole process (its socket
// table, its file descriptors), which the other tests of this package
// change while they run. It returns true in that child, where the test's
// body runs; in the parent it waits for the child, reports its output and
// its failure, and returns false.
func runAlone(t *testing.T) bool {
	t.Helper()
	if os.Getenv(aloneEnv) == t.Name() {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), aloneEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s alone in process of its own: %v\n%s", t.Name(), err, out)
	}
	t.Logf("ran alone in a process of its own:\n%s", out)
	return false
}
