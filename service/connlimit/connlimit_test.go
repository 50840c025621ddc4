//go:build linux

package connlimit

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// TestLimitListenerClosesTheLongestWaiting: with two slots, a third
// connection is accepted at once and the connection that waited longest
// for a request is closed for it; a connection whose request is being
// answered is never closed, and when both are, the third waits until one
// closes.
func TestLimitListenerClosesTheLongestWaiting(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := newLimitListener(inner, 2, true)
	defer ln.Close()
	var clients []net.Conn
	dial := func() net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		return c
	}
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	accept := func() *limitConn {
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return c.(*limitConn)
	}
	// closedByServer reports whether the server closed the client's
	// connection (EOF within a second).
	closedByServer := func(c net.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		_, err := c.Read(make([]byte, 1))
		return errors.Is(err, io.EOF)
	}

	first, second := dial(), dial()
	a1 := accept()
	a2 := accept()
	dial()
	accept() // at once: the first, waiting longest, is closed for it
	if !closedByServer(first) {
		t.Fatal("the longest-waiting connection was not closed for the new one")
	}
	if closedByServer(second) {
		t.Fatal("the second connection was closed too")
	}
	a1.Close() // the server's own close of a closed connection frees nothing twice
	if n := len(ln.lim.conns); n != 2 {
		t.Fatalf("%d connections tracked, want 2", n)
	}

	// Both open connections answering: a new one waits.
	ln.lim.mark(a2, 1)
	for c := range ln.lim.conns {
		if c != a2 {
			ln.lim.mark(c, 1)
		}
	}
	dial()
	accepted := make(chan *limitConn)
	go func() { accepted <- accept() }()
	select {
	case <-accepted:
		t.Fatal("a connection was accepted by closing one being answered")
	case <-time.After(200 * time.Millisecond):
	}
	a2.Close()
	select {
	case c := <-accepted:
		if c.Unwrap().RemoteAddr() == nil {
			t.Fatal("Unwrap lost the connection")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting connection was not accepted when one closed")
	}
	if n := len(ln.lim.conns); n != 2 {
		t.Fatalf("%d connections tracked, want 2", n)
	}
}

// TestLimitListenerWithoutEvictionWaits: the control socket's limit never
// closes a connection for a new one: the third waits until one closes.
func TestLimitListenerWithoutEvictionWaits(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := newLimitListener(inner, 2, false)
	defer ln.Close()
	for range 3 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	first, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ln.Accept(); err != nil {
		t.Fatal(err)
	}
	third := make(chan net.Conn)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Error(err)
		}
		third <- c
	}()
	select {
	case <-third:
		t.Fatal("a third connection was accepted while two were open")
	case <-time.After(200 * time.Millisecond):
	}
	first.Close()
	select {
	case <-third:
	case <-time.After(10 * time.Second):
		t.Fatal("the third connection was not accepted when the first closed")
	}
}

// TestLimitListenerClosesAStalledWriter: with every slot answering, a new
// connection is taken once an answer's write has not moved for writeStall
// (a client that never reads), and that connection is closed for it; an
// answer a client reads is never closed for it.
func TestLimitListenerClosesAStalledWriter(t *testing.T) {
	ln, dial, accept := twoSlots(t)
	stalledClient, readingClient := dial(), dial()
	stalled, reading := accept(), accept()
	ln.lim.mark(stalled, 1)
	ln.lim.mark(reading, 1)
	// The stalled answer: far more than the socket buffers hold, to a
	// client that never reads.
	stalledDone := make(chan error, 1)
	go func() {
		_, err := stalled.Write(make([]byte, 64<<20))
		stalledDone <- err
	}()
	// The read answer: a client that reads everything as it comes.
	go func() { _, _ = io.Copy(io.Discard, readingClient) }()
	stopReading := make(chan struct{})
	defer close(stopReading)
	go func() {
		buf := make([]byte, writeChunk)
		for {
			select {
			case <-stopReading:
				return
			default:
			}
			if _, err := reading.Write(buf); err != nil {
				return
			}
		}
	}()
	dial()
	third := make(chan *limitConn, 1)
	go func() { third <- accept() }()
	select {
	case <-third:
	case <-time.After(30 * time.Second):
		t.Fatal("the new connection was not taken while an answer stalled")
	}
	select {
	case err := <-stalledDone:
		if err == nil {
			t.Fatal("the stalled write ended without an error")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the stalled connection was not closed")
	}
	_ = stalledClient.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, stalledClient); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the stalled client's connection: %v, want it closed", err)
	}
	ln.lim.mu.Lock()
	_, readingKept := ln.lim.conns[reading]
	ln.lim.mu.Unlock()
	if !readingKept {
		t.Fatal("the connection whose answer was being read was closed")
	}
}

// TestLimitListenerKeepsAnUnreadRequest: a connection whose request sits
// unread in the kernel (the server has not got to it yet) is not closed
// for a new one although it waited longest; an idle one is, and the
// request is then read whole. Closing it reset the client: under a
// reconnecting slowloris flood with both cores busy, a probe was reset
// before the server read its request.
func TestLimitListenerKeepsAnUnreadRequest(t *testing.T) {
	_, dial, accept := twoSlots(t)
	const request = "GET /healthz/ready HTTP/1.1\r\nHost: x\r\n\r\n"
	asking := dial()
	served := accept()
	if _, err := io.WriteString(asking, request); err != nil {
		t.Fatal(err)
	}
	if !envoykit.Eventually(5*time.Second, func() bool { return hasUnreadInput(served.Conn) }) {
		t.Fatal("the request never showed as unread input")
	}
	idle := dial()
	accept()
	dial()
	accept() // the asking connection waited longest, but its request is unread
	_ = idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := idle.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("the idle connection was not closed for the new one: %v", err)
	}
	got := make([]byte, len(request))
	_ = served.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(served, got); err != nil || string(got) != request {
		t.Fatalf("the unread request: %q, %v", got, err)
	}
}

// twoSlots is a limit listener of two slots with eviction, closed at the
// test's end, and its dial and accept, which fail the test on an error.
func twoSlots(t *testing.T) (*limitListener, func() net.Conn, func() *limitConn) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := newLimitListener(inner, 2, true)
	t.Cleanup(func() { ln.Close() })
	dial := func() net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	accept := func() *limitConn {
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return c.(*limitConn)
	}
	return ln, dial, accept
}

// TestLimitListenerKeepsARequestReadWhole: a connection whose request the
// server has read whole (its blank line), but whose handler has not begun,
// is not closed for a new one; an idle one is. With both cores busy a
// scrape was closed unanswered in that gap. The blank line may come split
// across reads.
func TestLimitListenerKeepsARequestReadWhole(t *testing.T) {
	_, dial, accept := twoSlots(t)
	asking := dial()
	served := accept()
	got := make([]byte, 0, 64)
	for _, part := range []string{"GET /stats/prometheus HTTP/1.1\r\nHost: x\r\n\r", "\n"} {
		if _, err := io.WriteString(asking, part); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len(part))
		_ = served.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(served, buf); err != nil {
			t.Fatal(err)
		}
		got = append(got, buf...)
	}
	if !served.headerIn.Load() {
		t.Fatalf("the header %q was read whole, but the connection does not say so", got)
	}
	idle := dial()
	accept()
	dial()
	accept() // the asking connection waited longest, but its handler is about to run
	_ = idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := idle.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("the idle connection was not closed for the new one: %v", err)
	}
	_ = asking.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := asking.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the connection whose request was read was closed: %v", err)
	}
}
