//go:build linux

package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/testenvoy"
)

// statusMaxConns is the agent's cap on status connections (service).
const statusMaxConns = 64

// TestStatusPortFloodIsBounded: many keep-alive connections that each ask
// /healthz/ready once and stay idle hold at most the cap's worth of sockets
// in the agent (and few admin connections to Envoy), and the port serves
// again once they go. Before the cap, each was accepted and held, with an
// admin connection of its own.
func TestStatusPortFloodIsBounded(t *testing.T) {
	t.Parallel()
	p := startAgent(t, procOptions{})
	const n = 300
	answered := make(chan bool, n)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(p.ports.Status))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		go func() {
			fmt.Fprint(c, "GET /healthz/ready HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			answered <- err == nil && resp.StatusCode == 200
		}()
	}
	for i := range statusMaxConns {
		select {
		case ok := <-answered:
			if !ok {
				t.Fatalf("answer %d was not 200", i)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("only %d of %d connections answered within 30s", i, n)
		}
	}
	// The answered ones are idle now, holding every slot; the others wait
	// unaccepted in the kernel.
	if s := sockets(t, p.proc.Pid()); s > statusMaxConns+16 {
		t.Fatalf("the agent holds %d sockets with %d clients connected; want at most the cap %d and its own few", s, n, statusMaxConns)
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	if !testenvoy.Eventually(30*time.Second, func() bool { return p.healthz() == 200 }) {
		t.Fatal("/healthz/ready does not answer 200 after the flood ended")
	}
}

// sockets counts the sockets pid holds.
func sockets(t *testing.T, pid int) int {
	t.Helper()
	fds, err := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/fd/*")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(fd); err == nil && strings.HasPrefix(target, "socket:") {
			n++
		}
	}
	return n
}
