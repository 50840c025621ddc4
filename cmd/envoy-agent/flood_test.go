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
// admin connection of its own. Past the cap, the agent closes the
// longest-waiting connections for new ones: a connection may be closed
// unanswered, but none is answered anything but 200.
func TestStatusPortFloodIsBounded(t *testing.T) {
	t.Parallel()
	p := startAgent(t, procOptions{})
	const n = 300
	// answered gets 1 for a 200, 0 for a connection the agent closed
	// unanswered, -1 for any other answer.
	answered := make(chan int, n)
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
			switch {
			case err != nil:
				answered <- 0
			case resp.StatusCode == 200:
				answered <- 1
			default:
				answered <- -1
			}
		}()
	}
	ok := 0
	for i := range n {
		select {
		case a := <-answered:
			if a < 0 {
				t.Fatalf("answer %d was not 200", i)
			}
			ok += a
		case <-time.After(30 * time.Second):
			t.Fatalf("only %d of %d connections answered or closed within 30s", i, n)
		}
	}
	if ok < statusMaxConns {
		t.Fatalf("%d of %d connections answered 200, want at least the cap %d", ok, n, statusMaxConns)
	}
	// The answered ones are idle now; the agent holds at most the cap.
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
