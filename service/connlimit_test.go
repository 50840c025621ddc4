//go:build linux

package service

import (
	"net"
	"testing"
)

// TestLimitListener: the third connection waits until one of the first two
// closes.
func TestLimitListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := newLimitListener(inner, 2)
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
	default:
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	first.Close() // a second Close must not free a second slot
	c := <-third
	if c.(*limitConn).Unwrap().RemoteAddr() == nil {
		t.Fatal("Unwrap lost the connection")
	}
	if got := len(ln.(*limitListener).sem); got != 2 {
		t.Fatalf("%d slots in use after one close and one accept, want 2", got)
	}
}
