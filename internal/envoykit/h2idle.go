package envoykit

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// IdleH2 is an HTTP/2 (h2c) connection that made one request and then
// stays idle, recording at frame level what the server sends it: whether
// and when a GOAWAY came, and when the server closed the connection. Go's
// http.Transport hides both.
type IdleH2 struct {
	conn net.Conn

	mu       sync.Mutex
	answered bool
	goaway   time.Time
	closed   time.Time
	done     chan struct{}
}

// DialIdleH2 connects to addr, sends GET path on stream 1, and reads
// frames until the server closes the connection.
func DialIdleH2(addr, path string) (*IdleH2, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("h2c dial: %w", err)
	}
	fr := http2.NewFramer(conn, conn)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "test"}, {":path", path}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		conn.Close()
		return nil, fmt.Errorf("h2c preface: %w", err)
	}
	if err := fr.WriteSettings(); err != nil {
		conn.Close()
		return nil, fmt.Errorf("h2c settings: %w", err)
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		conn.Close()
		return nil, fmt.Errorf("h2c request: %w", err)
	}
	c := &IdleH2{conn: conn, done: make(chan struct{})}
	go c.read(fr)
	return c, nil
}

func (c *IdleH2) read(fr *http2.Framer) {
	defer close(c.done)
	for {
		f, err := fr.ReadFrame()
		now := time.Now()
		if err != nil {
			c.mu.Lock()
			c.closed = now
			c.mu.Unlock()
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = fr.WritePing(true, f.Data)
			}
		case *http2.DataFrame:
			if f.StreamEnded() && f.StreamID == 1 {
				c.mu.Lock()
				c.answered = true
				c.mu.Unlock()
			}
		case *http2.HeadersFrame:
			if f.StreamEnded() && f.StreamID == 1 {
				c.mu.Lock()
				c.answered = true
				c.mu.Unlock()
			}
		case *http2.GoAwayFrame:
			c.mu.Lock()
			if c.goaway.IsZero() {
				c.goaway = now
			}
			c.mu.Unlock()
		}
	}
}

// Answered reports whether the request on stream 1 got its whole answer.
func (c *IdleH2) Answered() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.answered
}

// GoAway is when the first GOAWAY came (zero if none); Closed is when the
// server closed the connection (zero while open).
func (c *IdleH2) GoAway() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.goaway
}

// Closed is when the server closed the connection, zero while it is open.
func (c *IdleH2) Closed() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Done is closed once the server closed the connection.
func (c *IdleH2) Done() <-chan struct{} { return c.done }

// Close closes the client side.
func (c *IdleH2) Close() { c.conn.Close() }
