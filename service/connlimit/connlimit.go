//go:build linux

// Package connlimit bounds the connections an HTTP server on a local port
// holds open, so that a local user's flood of idle or slow connections
// never keeps a health check or a scrape waiting: when a new connection
// would pass the limit, the one that has waited longest without a request
// being answered is closed for it (Listen). Serve with the Listener's
// Handler, ConnState and ConnContext.
package connlimit

import (
	"context"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// writeStall is how long an answer's write may go without moving
	// before its connection may be closed for a new one. Writes are made
	// in writeChunk pieces, so a slow but reading client moves within it.
	writeStall = 250 * time.Millisecond
	writeChunk = 32 << 10
	// stallPoll is how often a new connection that found every slot
	// answering looks for a stalled one again.
	stallPoll = 100 * time.Millisecond
)

// A local user can open connections to the agent's TCP ports and leave
// them idle, or send a request a byte a second (slowloris). With a fixed
// number of slots taken first-come, such a flood held every slot and a
// load balancer's health check waited behind it (13 s with 200 slowloris
// clients, 35.7 s after 10,000 idle connections), so a healthy host was
// marked down. The agent therefore accepts every connection at once, and
// when a new one would pass the limit it closes the connection that has
// waited longest without a request being answered: an idle keep-alive
// connection, one that has sent nothing, or one still sending its header.
// A connection whose request is being answered is never closed; only when
// every slot is answering does a new connection wait, in the kernel's
// accept queue, as before. A probe's connection is the newest, so the
// flood's older connections go first, and the probe is answered as soon
// as its request arrives.
//
// A connection whose request sits unread in the kernel, or has been read
// whole but not yet handed to its handler, is never closed for a new one
// either: it is about to be answered, and only the agent's own delay
// (cores busy) kept the server from getting to it. Under 200
// slowloris clients that reconnect as soon as they are cut, 64 new
// connections came within milliseconds, and a probe whose request had
// not been read yet was the longest-waiting and was reset, with its
// request unanswered. A slowloris client's byte is read as it comes; an
// idle connection has nothing to read.
//
// A connection whose answer has not moved for writeStall counts as waiting
// too: a client that pipelines requests and never reads (or reads with a
// one-byte window) kept a handler blocked writing, never closed, until the
// write timeout; 16 of them held the metrics port, and a scrape waited
// 27.2 s. Such a connection is closed for a new one, after the idle ones,
// the one stalled longest first; a new connection that finds every slot
// answering looks again every stallPoll.

// connLimiter tracks a server's open connections and picks which to close.
type connLimiter struct {
	max int
	// evict: close the longest-waiting connection for a new one (the TCP
	// ports, which any local user reaches); without it a new connection
	// waits for a free slot (the control socket, which only operators
	// reach, and whose requests a new one must never cut).
	evict bool

	mu    sync.Mutex
	conns map[*limitConn]*connState
	freed chan struct{} // signalled when a connection closes
}

// connState is what the limiter knows of one connection.
type connState struct {
	since    time.Time // when it last began to wait for a request
	handling int       // requests being answered (HTTP/1.1: 0 or 1)
}

func newConnLimiter(max int, evict bool) *connLimiter {
	return &connLimiter{max: max, evict: evict, conns: make(map[*limitConn]*connState), freed: make(chan struct{}, 1)}
}

// limitListener accepts connections for a connLimiter.
type limitListener struct {
	net.Listener
	lim *connLimiter
}

// Listener is a net.Listener whose connections are limited.
type Listener = limitListener

// Listen wraps l so that at most n of its connections are open at once;
// with evict, closing the longest-waiting one for a new one, else making
// the new one wait. An http.Server serving it sets Handler to
// l.Handler(h), ConnState to l.ConnState and ConnContext to ConnContext.
func Listen(l net.Listener, n int, evict bool) *Listener { return newLimitListener(l, n, evict) }

// Handler marks a request as being answered while h runs: its connection
// is then never closed for a newer one.
func (l *limitListener) Handler(h http.Handler) http.Handler { return l.lim.handling(h) }

// ConnState is the http.Server's ConnState: a connection that goes idle
// waits for its next request from then.
func (l *limitListener) ConnState(c net.Conn, state http.ConnState) { l.lim.connEvent(c, state) }

// ConnContext is (part of) the http.Server's ConnContext: it lets Handler
// find a request's connection.
func ConnContext(ctx context.Context, c net.Conn) context.Context { return withLimitConn(ctx, c) }

// newLimitListener wraps l so that at most n of its connections are open
// at once; with evict, closing the longest-waiting one for a new one (see
// above), else making the new one wait.
func newLimitListener(l net.Listener, n int, evict bool) *limitListener {
	return &limitListener{Listener: l, lim: newConnLimiter(n, evict)}
}

// Accept takes the next connection at once and makes room for it: it
// closes the connection that has waited longest for a request, or, when
// every connection is answering one, waits until one closes.
func (l *limitListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	lc := &limitConn{Conn: c}
	lc.release = sync.OnceFunc(func() { l.lim.remove(lc) })
	var poll <-chan time.Time
	for !l.lim.add(lc) {
		if l.lim.evict {
			poll = time.After(stallPoll)
		}
		select {
		case <-l.lim.freed:
		case <-poll:
		}
	}
	return lc, nil
}

// add takes lc in when there is room or a waiting connection to close for
// it, and reports whether it did.
func (l *connLimiter) add(lc *limitConn) bool {
	l.mu.Lock()
	var victim *limitConn
	if len(l.conns) >= l.max && !l.evict {
		l.mu.Unlock()
		return false
	}
	if len(l.conns) >= l.max {
		var waiting []*limitConn
		var stalled *limitConn
		var stalledSince int64
		stallBefore := time.Now().Add(-writeStall).UnixNano()
		for c, s := range l.conns {
			if s.handling == 0 {
				waiting = append(waiting, c)
			}
			if w := c.writing.Load(); s.handling > 0 && w != 0 && w <= stallBefore && (stalled == nil || w < stalledSince) {
				stalled, stalledSince = c, w
			}
		}
		slices.SortFunc(waiting, func(a, b *limitConn) int { return l.conns[a].since.Compare(l.conns[b].since) })
		for _, c := range waiting {
			if !c.headerIn.Load() && !hasUnreadInput(c.Conn) {
				victim = c
				break
			}
		}
		if victim == nil {
			victim = stalled
		}
		if victim == nil {
			l.mu.Unlock()
			return false
		}
		delete(l.conns, victim)
	}
	l.conns[lc] = &connState{since: time.Now()}
	l.mu.Unlock()
	if victim != nil {
		victim.Conn.Close() // the server sees the error and closes it again
	}
	return true
}

func (l *connLimiter) remove(lc *limitConn) {
	l.mu.Lock()
	delete(l.conns, lc)
	l.mu.Unlock()
	select {
	case l.freed <- struct{}{}:
	default:
	}
}

// connEvent records what the HTTP server does with a connection
// (http.Server.ConnState): an idle keep-alive connection waits again from now.
func (l *connLimiter) connEvent(c net.Conn, state http.ConnState) {
	lc, ok := c.(*limitConn)
	if !ok || state != http.StateIdle {
		return
	}
	lc.headerIn.Store(false)
	lc.tail.Store(0)
	l.mu.Lock()
	if s := l.conns[lc]; s != nil {
		s.since = time.Now()
	}
	l.mu.Unlock()
}

// handling marks a connection's request as being answered while h runs, so
// that it is never closed for a newer connection.
func (l *connLimiter) handling(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lc, _ := r.Context().Value(limitConnKey{}).(*limitConn)
		l.mark(lc, 1)
		defer l.mark(lc, -1)
		h.ServeHTTP(w, r)
	})
}

func (l *connLimiter) mark(lc *limitConn, d int) {
	if lc == nil {
		return
	}
	l.mu.Lock()
	if s := l.conns[lc]; s != nil {
		s.handling += d
	}
	l.mu.Unlock()
}

// limitConnKey is the context key of a request's *limitConn.
type limitConnKey struct{}

// withLimitConn is the part of http.Server.ConnContext that lets handling
// find the request's connection.
func withLimitConn(ctx context.Context, c net.Conn) context.Context {
	if lc, ok := c.(*limitConn); ok {
		return context.WithValue(ctx, limitConnKey{}, lc)
	}
	return ctx
}

// limitConn leaves its limiter when closed, once, and tells it how long
// its current write has not moved.
type limitConn struct {
	net.Conn
	release func()
	// writing is when the write of the current piece began (UnixNano), 0
	// when none is under way.
	writing atomic.Int64
	// headerIn is set once a request's header has been read whole (its
	// blank line), until the connection is idle again: its handler is
	// about to run. tail holds the last bytes read, to find a blank line
	// split across reads.
	headerIn atomic.Bool
	tail     atomic.Uint32
}

// Read notes when a request's header has arrived whole, so that the
// connection is not closed for a new one between the server's read of the
// request and its handler's start (with both cores busy, a scrape was
// closed unanswered there after its request had been read).
func (c *limitConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.headerIn.Load() {
		t := c.tail.Load()
		for _, b := range p[:n] {
			t = t<<8 | uint32(b)
			if t == 0x0d0a0d0a || t&0xffff == 0x0a0a { // CRLF CRLF, or LF LF
				c.headerIn.Store(true)
				break
			}
		}
		c.tail.Store(t)
	}
	return n, err
}

// Write writes p in pieces of writeChunk, noting when each began.
func (c *limitConn) Write(p []byte) (int, error) {
	defer c.writing.Store(0)
	n := 0
	for n < len(p) {
		c.writing.Store(time.Now().UnixNano())
		m, err := c.Conn.Write(p[n:min(len(p), n+writeChunk)])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}

// Unwrap returns the accepted connection.
func (c *limitConn) Unwrap() net.Conn { return c.Conn }

// hasUnreadInput reports whether c has bytes the server has not read yet
// in its kernel receive queue (SIOCINQ); false when that cannot be asked.
func hasUnreadInput(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	if err := raw.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); err != nil {
		return false
	}
	return n > 0
}
