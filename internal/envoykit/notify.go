package envoykit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// NotifySocket is a real unix datagram socket standing in for systemd's
// NOTIFY_SOCKET. It keeps every datagram with the time it arrived.
type NotifySocket struct {
	Path string
	dir  string
	conn *net.UnixConn

	mu   sync.Mutex
	msgs []Message
	cond chan struct{} // closed and replaced on every datagram
}

// Message is one datagram received, with when it came.
type Message struct {
	At   time.Time
	Text string
}

// ErrAborted is what WaitFor returns when its abort channel closed first
// (the process that was to send the message exited).
var ErrAborted = errors.New("aborted")

// ListenNotify listens on a fresh socket in a new temporary folder (socket
// paths are short: a test's own temporary folder can be too long for one).
func ListenNotify() (*NotifySocket, error) {
	dir, err := os.MkdirTemp("", "notify")
	if err != nil {
		return nil, fmt.Errorf("notify socket: %w", err)
	}
	path := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("notify socket: %w", err)
	}
	ns := &NotifySocket{Path: path, dir: dir, conn: conn, cond: make(chan struct{})}
	go ns.read()
	return ns, nil
}

func (ns *NotifySocket) read() {
	buf := make([]byte, 64<<10)
	for {
		n, err := ns.conn.Read(buf)
		at := time.Now()
		if err != nil {
			return
		}
		ns.mu.Lock()
		ns.msgs = append(ns.msgs, Message{At: at, Text: string(buf[:n])})
		close(ns.cond)
		ns.cond = make(chan struct{})
		ns.mu.Unlock()
	}
}

// Close stops listening and removes the socket.
func (ns *NotifySocket) Close() {
	ns.conn.Close()
	os.RemoveAll(ns.dir)
}

// Messages returns every datagram so far.
func (ns *NotifySocket) Messages() []Message {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return append([]Message(nil), ns.msgs...)
}

// Mark is how many datagrams came so far: WaitFrom(ctx, kv, Mark(), ...)
// looks only at later ones.
func (ns *NotifySocket) Mark() int {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return len(ns.msgs)
}

// WaitFrom waits for a datagram, from the from-th on, with a line that
// starts with kv ("READY=1", "STATUS=draining"). It gives up when ctx ends
// (its error) or abort closes (ErrAborted); abort may be nil.
func (ns *NotifySocket) WaitFrom(ctx context.Context, kv string, from int, abort <-chan struct{}) (Message, error) {
	for seen := from; ; {
		ns.mu.Lock()
		msgs, cond := ns.msgs, ns.cond
		ns.mu.Unlock()
		for ; seen < len(msgs); seen++ {
			if HasAssignment(msgs[seen].Text, kv) {
				return msgs[seen], nil
			}
		}
		select {
		case <-cond:
		case <-abort:
			return Message{}, fmt.Errorf("waiting for %s: %w", kv, ErrAborted)
		case <-ctx.Done():
			return Message{}, fmt.Errorf("no %s on the notify socket: %w (got %q)", kv, ctx.Err(), Texts(ns.Messages()))
		}
	}
}

// NewNotifySocket listens on a fresh socket path (ListenNotify); closed
// when the test ends. It fails the test on an error.
func NewNotifySocket(t testing.TB) *NotifySocket {
	t.Helper()
	ns, err := ListenNotify()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Close)
	return ns
}

// WaitFor waits up to timeout for a datagram, of all that came, with a
// line that starts with kv ("READY=1", "EXTEND_TIMEOUT_USEC=",
// "STATUS=draining") (WaitFrom); it fails the test when none comes.
func (ns *NotifySocket) WaitFor(t testing.TB, kv string, timeout time.Duration) Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	m, err := ns.WaitFrom(ctx, kv, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Count counts datagrams with kv received in [from, to).
func (ns *NotifySocket) Count(kv string, from, to time.Time) int {
	n := 0
	for _, m := range ns.Messages() {
		if !m.At.Before(from) && m.At.Before(to) && HasAssignment(m.Text, kv) {
			n++
		}
	}
	return n
}

// HasAssignment reports whether a datagram has a line starting with kv.
func HasAssignment(text, kv string) bool {
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, kv) {
			return true
		}
	}
	return false
}

// Texts are the messages' texts.
func Texts(ms []Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Text
	}
	return out
}
