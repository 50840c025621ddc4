//go:build linux

package envoy

import (
	"net"
	"os"
	"strings"
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
			if got := countDownstream(entries, listening, tt.owners, tt.counted); got != tt.want {
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
	if got := countDownstream(closed, listening, owners, nil); got != 2 {
		t.Errorf("listener closed: got %d, want the 2 connections accepted on it", got)
	}
	if fresh := (listenAddrs{}); countDownstream(closed, fresh, owners, nil) != 0 {
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
// client's end of it, also this process's, does not.
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
	mine, err := socketInodes(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	entries, err := readSocketTable(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	listening := listenAddrs{}
	listening.update(entries, mine, 0)
	if got := countDownstream(entries, listening, mine, nil); got != 1 {
		t.Errorf("%d connections accepted on this process's listener, want 1", got)
	}
}
