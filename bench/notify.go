package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// notifySocket is a unix datagram socket standing in for systemd's
// NOTIFY_SOCKET. It keeps every datagram with the time it arrived.
type notifySocket struct {
	path string
	conn *net.UnixConn

	mu   sync.Mutex
	msgs []notifyMsg
	cond chan struct{} // closed and replaced on every datagram
}

type notifyMsg struct {
	at   time.Time
	text string
}

func listenNotify(dir string) (*notifySocket, error) {
	path := filepath.Join(dir, "notify.sock")
	_ = os.Remove(path)
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return nil, fmt.Errorf("notify socket: %w", err)
	}
	ns := &notifySocket{path: path, conn: conn, cond: make(chan struct{})}
	go ns.read()
	return ns, nil
}

func (ns *notifySocket) read() {
	buf := make([]byte, 64<<10)
	for {
		n, err := ns.conn.Read(buf)
		at := time.Now()
		if err != nil {
			return
		}
		ns.mu.Lock()
		ns.msgs = append(ns.msgs, notifyMsg{at: at, text: string(buf[:n])})
		close(ns.cond)
		ns.cond = make(chan struct{})
		ns.mu.Unlock()
	}
}

func (ns *notifySocket) close() {
	ns.conn.Close()
	_ = os.Remove(ns.path)
}

// mark is how many datagrams came so far; waitFor(kv, mark) looks only at
// later ones.
func (ns *notifySocket) mark() int {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return len(ns.msgs)
}

// waitFor waits for a datagram after mark with a line starting with kv
// ("READY=1") and returns when it arrived. It gives up after timeout, when
// p exits, or when ctx ends.
func (ns *notifySocket) waitFor(ctx context.Context, p *proc, kv string, mark int, timeout time.Duration) (time.Time, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for seen := mark; ; {
		ns.mu.Lock()
		msgs, cond := ns.msgs, ns.cond
		ns.mu.Unlock()
		for ; seen < len(msgs); seen++ {
			if hasAssignment(msgs[seen].text, kv) {
				return msgs[seen].at, nil
			}
		}
		select {
		case <-cond:
		case <-p.done:
			return time.Time{}, p.failure(fmt.Errorf("%s exited (%v) before it sent %s", p.name, p.err, kv))
		case <-t.C:
			return time.Time{}, p.failure(fmt.Errorf("no %s from %s on the notify socket within %s", kv, p.name, timeout))
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("waiting for %s: %w", kv, ctx.Err())
		}
	}
}

// count counts datagrams with kv that arrived in [from, to).
func (ns *notifySocket) count(kv string, from, to time.Time) int {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	n := 0
	for _, m := range ns.msgs {
		if !m.at.Before(from) && m.at.Before(to) && hasAssignment(m.text, kv) {
			n++
		}
	}
	return n
}

func hasAssignment(text, kv string) bool {
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, kv) {
			return true
		}
	}
	return false
}
