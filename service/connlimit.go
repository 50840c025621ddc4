//go:build linux

package service

import (
	"net"
	"sync"
)

// limitListener accepts at most n connections at once; Accept waits while
// n are open, so further clients wait in the kernel's accept queue and cost
// the agent nothing. (golang.org/x/net/netutil.LimitListener does the same
// but hides the accepted connection's type, which the control socket needs
// for its peer's credentials; limitConn.Unwrap gives it back.)
type limitListener struct {
	net.Listener
	sem chan struct{}
}

func newLimitListener(l net.Listener, n int) net.Listener {
	return &limitListener{Listener: l, sem: make(chan struct{}, n)}
}

func (l *limitListener) Accept() (net.Conn, error) {
	l.sem <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: sync.OnceFunc(func() { <-l.sem })}, nil
}

// limitConn gives its slot back when closed, once.
type limitConn struct {
	net.Conn
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}

// Unwrap returns the accepted connection.
func (c *limitConn) Unwrap() net.Conn { return c.Conn }
