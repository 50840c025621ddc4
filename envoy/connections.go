//go:build linux

package envoy

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Downstream connections, counted from the kernel's socket tables rather
// than from Envoy's stats.
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
// listening addresses other than the admin port. The cost is one read of
// each epoch's /proc/PID/fd links and of /proc/PID/net/tcp{,6}.
//
// Envoy's listening addresses are remembered past the listeners' close:
// a graceful drain (drain_listeners?graceful, and an old epoch after a
// hot restart) closes the listening sockets at the end of --drain-time-s
// while the connections accepted on them still serve requests. An address
// is forgotten once nothing listens on it and no connection is left on it.
//
// Not counted: UDP (QUIC) and unix-domain listeners.

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
// when counted is nil, those held by one of owners or still waiting in an
// accept queue (inode 0).
func countDownstream(entries []socketEntry, listening listenAddrs, owners, counted map[uint64]bool) int {
	n := 0
	for _, s := range entries {
		if s.state != tcpEstablished && s.state != tcpCloseWait {
			continue
		}
		if !listening.has(s.local) {
			continue
		}
		switch {
		case counted == nil && (owners[s.inode] || (s.inode == 0 && s.state == tcpEstablished)):
			n++
		case counted != nil && counted[s.inode]:
			n++
		}
	}
	return n
}

// ActiveConnections counts the downstream connections of every epoch not
// yet reaped (the serving one and those still draining after a hot
// restart), from the kernel's socket tables: complete and current, where
// Envoy's own gauges are neither right after a hot restart. Only when
// /proc cannot be read does it answer the serving epoch's stats.
func (e *Envoy) ActiveConnections(ctx context.Context) (int, error) {
	n, err := e.countConnections(nil)
	if err == nil {
		return n, nil
	}
	if m, aerr := e.admin.ActiveConnections(ctx); aerr == nil {
		return m, nil
	}
	return 0, err
}

// epochConnections counts the downstream connections process p holds.
func (e *Envoy) epochConnections(p *process) (int, error) {
	return e.countConnections(p)
}

func (e *Envoy) countConnections(only *process) (int, error) {
	e.mu.Lock()
	var pids []int
	for p := range e.procs {
		if !p.exited() {
			pids = append(pids, p.pid)
		}
	}
	adminPort := uint16(e.cfg.AdminPort)
	e.mu.Unlock()
	if len(pids) == 0 {
		return 0, nil
	}
	e.countMu.Lock()
	defer e.countMu.Unlock()
	onlyPid := 0
	if only != nil {
		onlyPid = only.pid
	}
	return countPids(pids, onlyPid, adminPort, e.listening)
}

// CountDownstream counts the downstream connections of the Envoy processes
// pids from the kernel, as one drain poll does (adminPort left out), with
// no listening address remembered from an earlier count. For the
// benchmark: the agent counts with Envoy.ActiveConnections.
func CountDownstream(pids []int, adminPort int) (int, error) {
	return countPids(pids, 0, uint16(adminPort), listenAddrs{})
}

// countPids counts the downstream connections of pids (of onlyPid alone
// when it is not 0), updating listening.
func countPids(pids []int, onlyPid int, adminPort uint16, listening listenAddrs) (int, error) {
	owners := map[uint64]bool{}
	var counted map[uint64]bool
	for _, pid := range pids {
		inodes, err := socketInodes(pid)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			continue // exited meanwhile
		}
		if err != nil {
			return 0, err
		}
		for i := range inodes {
			owners[i] = true
		}
		if pid == onlyPid {
			counted = inodes
		}
	}
	if onlyPid != 0 && counted == nil {
		return 0, nil // it has exited
	}
	var entries []socketEntry
	var err error
	for _, pid := range pids { // any epoch's: they share the network namespace
		if entries, err = readSocketTable(pid); err == nil {
			break
		}
	}
	if err != nil {
		return 0, err
	}
	listening.update(entries, owners, adminPort)
	return countDownstream(entries, listening, owners, counted), nil
}
