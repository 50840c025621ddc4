//go:build linux

// Package conncount counts Envoy's downstream connections from the
// kernel's socket tables rather than from Envoy's stats (Counter): what a
// drain and a reload's wait poll.
//
// Why not the stats: after a hot restart the new epoch's
// /stats?usedonly hides every listener gauge it has not written itself,
// and the old epoch's connections are merged into the new one's gauges
// (and into server.total_connections) only at the stats flush interval
// (5 s by default), in both directions: a drain that reads them right
// after a reload sees 0 while the old epoch still serves requests, and
// one that reads them after the old epoch's last request sees it for up
// to 5 s more. The kernel knows every epoch's sockets now: a downstream
// connection is a TCP socket, held by an epoch (or waiting in a
// listener's accept queue), whose local address is one of Envoy's
// listening addresses other than the admin port.
//
// The cost follows the connections, not the listeners, where it can: a full
// count reads every epoch's /proc/PID/fd links and every TCP socket of the
// network namespace, listeners included (10,000 listeners are 10,000
// links per epoch and 10,000 lines of /proc/net/tcp per worker); a quick
// count dumps only the established and close-wait sockets (sock_diag,
// internal/sockdiag) and finds their owners among the links the last full
// count read. A quick count answers only when every connection on a
// listening address has a known owner and at least one is left; a zero,
// an unknown connection (accepted since), a changed set of epochs or a full
// count older than fullCountEvery makes the count a full one. A drain acts
// only on a zero, and a zero always comes from a full count.
//
// Why a quick count may trust the links of an earlier full count: an
// established socket named in an epoch's fd links then, and still
// established now, is still that epoch's, since Envoy passes only listening
// sockets between processes (hot restart) and a socket lives only while
// some process holds it.
//
// Envoy's listening addresses are remembered past the listeners' close:
// a graceful drain (drain_listeners?graceful, and an old epoch after a
// hot restart) closes the listening sockets at the end of --drain-time-s
// while the connections accepted on them still serve requests. An address
// is forgotten once nothing listens on it and no connection is left on it.
//
// Not counted: UDP (QUIC) and unix-domain listeners.
package conncount

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/sockdiag"
)

// TCP states of /proc/net/tcp (include/net/tcp_states.h).
const (
	tcpEstablished = 0x01
	tcpCloseWait   = 0x08
	tcpListen      = 0x0A
)

// socketEntry is one line of /proc/net/tcp or tcp6.
type socketEntry struct {
	local netip.AddrPort
	state int
	inode uint64
}

// socketInodes returns the inodes of the sockets process pid holds.
func socketInodes(pid int) (map[uint64]bool, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list envoy's sockets: %w", err)
	}
	inodes := make(map[uint64]bool, len(entries))
	for _, e := range entries {
		link, err := os.Readlink(dir + "/" + e.Name())
		if errors.Is(err, fs.ErrNotExist) {
			continue // closed meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("read envoy's sockets: %w", err)
		}
		if s, ok := strings.CutPrefix(link, "socket:["); ok {
			if n, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 64); err == nil {
				inodes[n] = true
			}
		}
	}
	return inodes, nil
}

// readSocketTable reads /proc/PID/net/tcp and tcp6 (the tables of pid's
// network namespace).
func readSocketTable(pid int) ([]socketEntry, error) {
	var all []socketEntry
	for _, name := range []string{"tcp", "tcp6"} {
		f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/net/" + name)
		if err != nil {
			if name == "tcp6" && errors.Is(err, os.ErrNotExist) {
				continue // IPv6 disabled
			}
			return nil, fmt.Errorf("read socket table: %w", err)
		}
		entries, err := parseSocketTable(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name(), err)
		}
		all = append(all, entries...)
	}
	return all, nil
}

// parseSocketTable parses the text of /proc/net/tcp or /proc/net/tcp6.
func parseSocketTable(f io.Reader) ([]socketEntry, error) {
	var out []socketEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for line := 1; sc.Scan(); line++ {
		fields := strings.Fields(sc.Text())
		if line == 1 && len(fields) > 0 && fields[0] == "sl" {
			continue
		}
		if len(fields) < 10 {
			return nil, fmt.Errorf("line %d: %d fields, want at least 10", line, len(fields))
		}
		local, err := parseHexAddrPort(fields[1])
		if err != nil {
			return nil, fmt.Errorf("line %d: local address: %w", line, err)
		}
		state, err := strconv.ParseUint(fields[3], 16, 8)
		if err != nil {
			return nil, fmt.Errorf("line %d: state %q: %w", line, fields[3], err)
		}
		inode, err := strconv.ParseUint(fields[9], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: inode %q: %w", line, fields[9], err)
		}
		out = append(out, socketEntry{local: local, state: int(state), inode: inode})
	}
	return out, sc.Err()
}

// parseHexAddrPort parses "0100007F:1F90": the address as the kernel's
// 32-bit words in host (little-endian) order, the port in hex.
func parseHexAddrPort(s string) (netip.AddrPort, error) {
	h, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("%q: no port", s)
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%q: port: %w", s, err)
	}
	b, err := hex.DecodeString(h)
	if err != nil || (len(b) != 4 && len(b) != 16) {
		return netip.AddrPort{}, fmt.Errorf("%q: not an IPv4 or IPv6 address", s)
	}
	for i := 0; i < len(b); i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	addr, _ := netip.AddrFromSlice(b)
	return netip.AddrPortFrom(addr.Unmap(), uint16(port)), nil
}

// listenKey is a listening address: an IP (unspecified for a wildcard
// listener) and a port.
type listenKey struct {
	addr netip.Addr
	port uint16
}

// listenAddrs is the set of Envoy's listening addresses a count has seen.
type listenAddrs map[listenKey]bool

// has tells whether a connection with local address a was accepted on one
// of the addresses: the same address, or a wildcard listener on its port.
func (l listenAddrs) has(a netip.AddrPort) bool {
	return l[listenKey{a.Addr(), a.Port()}] || l[listenKey{netip.IPv4Unspecified(), a.Port()}] || l[listenKey{netip.IPv6Unspecified(), a.Port()}]
}

// update adds the listening sockets in entries held by one of owners
// (leaving out skipPort) and forgets the addresses that are no longer
// listening and have no connection left.
func (l listenAddrs) update(entries []socketEntry, owners map[uint64]bool, skipPort uint16) {
	now := listenAddrs{}
	for _, s := range entries {
		if s.state == tcpListen && owners[s.inode] && s.local.Port() != skipPort {
			now[listenKey{s.local.Addr(), s.local.Port()}] = true
		}
	}
	inUse := listenAddrs{}
	for _, s := range entries {
		if s.state == tcpEstablished || s.state == tcpCloseWait {
			inUse[listenKey{s.local.Addr(), s.local.Port()}] = true
			inUse[listenKey{netip.IPv4Unspecified(), s.local.Port()}] = true
			inUse[listenKey{netip.IPv6Unspecified(), s.local.Port()}] = true
		}
	}
	for k := range l {
		if !now[k] && !inUse[k] {
			delete(l, k)
		}
	}
	for k := range now {
		l[k] = true
	}
}

// countDownstream counts, in entries, the connections accepted on one of
// Envoy's listening addresses: those held by a process in counted, and,
// when counted is nil, those owned by an Envoy process or still waiting in
// an accept queue (inode 0).
func countDownstream(entries []socketEntry, listening listenAddrs, owned func(uint64) bool, counted map[uint64]bool) int {
	n := 0
	for _, s := range entries {
		if s.state != tcpEstablished && s.state != tcpCloseWait {
			continue
		}
		if !listening.has(s.local) {
			continue
		}
		switch {
		case counted == nil && (owned(s.inode) || (s.inode == 0 && s.state == tcpEstablished)):
			n++
		case counted != nil && counted[s.inode]:
			n++
		}
	}
	return n
}

// fullCountEvery bounds how long quick counts rest on the fd links and
// listening addresses of the last full count: a listener added since (LDS)
// is seen within it.
const fullCountEvery = 2 * time.Second

// Counter counts the downstream connections of Envoy's processes from the
// kernel, remembering between counts Envoy's listening addresses and the
// sockets each process held (see the package doc). Safe for concurrent use.
type Counter struct {
	mu        sync.Mutex
	listening listenAddrs
	held      map[int]map[uint64]bool          // socket inodes per process, at the last full count
	fullAt    time.Time                        // when the last full count was made
	noDiag    bool                             // sock_diag failed: every count reads /proc/PID/net/tcp{,6}
	full      int                              // full counts made (for the tests and the benchmark)
	logf      func(format string, args ...any) // says once that sock_diag was refused (nil: silent)
}

// New returns a counter that knows no listening address yet. logf, when
// not nil, is told once that sock_diag was refused and every count reads
// /proc/PID/net/tcp and tcp6 instead.
func New(logf func(format string, args ...any)) *Counter {
	return &Counter{listening: listenAddrs{}, logf: logf}
}

// Count counts the downstream connections of the Envoy processes pids
// (connections on adminPort left out), as one drain poll does.
func (c *Counter) Count(pids []int, adminPort int) (int, error) {
	return c.count(pids, 0, uint16(adminPort))
}

// CountHeld counts the downstream connections that process pid, one of
// the Envoy processes pids, holds (connections on adminPort left out):
// those of one epoch among all of them.
func (c *Counter) CountHeld(pids []int, pid, adminPort int) (int, error) {
	return c.count(pids, pid, uint16(adminPort))
}

// FullCounts is how many of the counts were full ones.
func (c *Counter) FullCounts() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.full
}

// count counts the downstream connections of pids (of onlyPid alone when
// it is not 0).
func (c *Counter) count(pids []int, onlyPid int, adminPort uint16) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n, ok := c.quick(pids, onlyPid); ok {
		return n, nil
	}
	return c.fullCount(pids, onlyPid, adminPort)
}

// quick counts from one dump of the established and close-wait sockets,
// with the owners and listening addresses of the last full count; ok is
// false when only a full count can answer.
func (c *Counter) quick(pids []int, onlyPid int) (n int, ok bool) {
	if c.noDiag || c.held == nil || len(pids) != len(c.held) || time.Since(c.fullAt) > fullCountEvery {
		return 0, false
	}
	for _, pid := range pids {
		if _, ok := c.held[pid]; !ok {
			return 0, false
		}
	}
	conns, err := sockdiag.Dump(sockdiag.Established | sockdiag.CloseWait)
	if err != nil {
		return 0, false
	}
	entries := fromDiag(conns)
	owned := func(inode uint64) bool {
		for _, h := range c.held {
			if h[inode] {
				return true
			}
		}
		return false
	}
	for _, s := range entries {
		if s.inode != 0 && c.listening.has(s.local) && !owned(s.inode) {
			return 0, false // accepted since the last full count
		}
	}
	var counted map[uint64]bool
	if onlyPid != 0 {
		counted = c.held[onlyPid]
	}
	n = countDownstream(entries, c.listening, owned, counted)
	return n, n > 0
}

// fullCount reads every process's fd links and every TCP socket, and
// remembers them for the quick counts that follow.
func (c *Counter) fullCount(pids []int, onlyPid int, adminPort uint16) (int, error) {
	c.full++
	held := make(map[int]map[uint64]bool, len(pids))
	for _, pid := range pids {
		inodes, err := socketInodes(pid)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			continue // exited meanwhile
		}
		if err != nil {
			return 0, err
		}
		held[pid] = inodes
	}
	if onlyPid != 0 && held[onlyPid] == nil {
		return 0, nil // it has exited
	}
	entries, err := c.sockets(pids)
	if err != nil {
		return 0, err
	}
	owners := map[uint64]bool{}
	for _, h := range held {
		for i := range h {
			owners[i] = true
		}
	}
	c.listening.update(entries, owners, adminPort)
	c.held, c.fullAt = held, time.Now()
	var counted map[uint64]bool
	if onlyPid != 0 {
		counted = held[onlyPid]
	}
	return countDownstream(entries, c.listening, func(i uint64) bool { return owners[i] }, counted), nil
}

// sockets lists every TCP socket of Envoy's network namespace in the
// states a count reads: from sock_diag, or, where a sandbox refuses it,
// from /proc/PID/net/tcp{,6} of any of pids (they share the namespace).
func (c *Counter) sockets(pids []int) ([]socketEntry, error) {
	if !c.noDiag {
		all, err := sockdiag.Dump(sockdiag.Established | sockdiag.CloseWait | sockdiag.Listen)
		if err == nil {
			return fromDiag(all), nil
		}
		c.noDiag = true
		if c.logf != nil {
			c.logf("connection count: %v; every count reads /proc/PID/net/tcp and tcp6 (the unit's RestrictAddressFamilies= needs AF_NETLINK)", err)
		}
	}
	var entries []socketEntry
	var err error
	for _, pid := range pids {
		if entries, err = readSocketTable(pid); err == nil {
			return entries, nil
		}
	}
	return nil, err
}

// fromDiag turns a sock_diag dump into socket table entries.
func fromDiag(all []sockdiag.Socket) []socketEntry {
	out := make([]socketEntry, len(all))
	for i, s := range all {
		out[i] = socketEntry{local: s.Local, state: s.State, inode: s.Inode}
	}
	return out
}

// Listening reports whether process pid still holds a listening TCP
// socket, that is, whether it may still accept connections; false once it
// has exited.
func (c *Counter) Listening(pid int) (bool, error) {
	held, err := socketInodes(pid)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return false, nil // it has exited
	}
	if err != nil {
		return false, err
	}
	c.mu.Lock()
	entries, err := c.sockets([]int{pid})
	c.mu.Unlock()
	if err != nil {
		return false, err
	}
	for _, s := range entries {
		if s.state == tcpListen && held[s.inode] {
			return true, nil
		}
	}
	return false, nil
}
