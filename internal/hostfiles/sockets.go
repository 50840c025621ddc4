//go:build linux

// Envoy's hot-restart sockets: files in the run folder, not abstract names.

package hostfiles

import (
	"fmt"
	"path/filepath"
	"strconv"
	"syscall"
)

// Without --socket-path, Envoy's hot-restart channel is abstract unix
// datagram sockets (@envoy_domain_socket_parent_<base_id*10+n> and
// _child_), which carry no permissions: any local user could ask the
// serving Envoy for its listening sockets (SCM_RIGHTS), drain it or
// terminate it. With --socket-path PREFIX --socket-mode 600 Envoy binds
// files PREFIX_<role>_<base_id*10+n> instead (read in Envoy's
// hot_restarting_base.cc, createDomainSocketAddress; checked on 1.36.4,
// 1.39.3 and 1.40.0, which all have both flags), mode 0600 in a run folder
// only the agent's user can enter: nobody else can reach them.

// hotRestartSocketName is the --socket-path prefix inside the run folder.
const hotRestartSocketName = "hot-restart"

// HotRestartSocketMode is --socket-mode: the sockets' file mode, octal.
const HotRestartSocketMode = "600"

// hotRestartSocketRoles are the roles Envoy 1.40 binds a socket for, each
// once per epoch slot: PREFIX_parent_N, PREFIX_child_N and their UDP
// (QUIC packet forwarding) twins.
var hotRestartSocketRoles = []string{"parent", "child", "udp_parent", "udp_child"}

// hotRestartSlots is how many epochs Envoy keeps sockets for at once
// (MaxConcurrentProcesses in Envoy): N runs from base_id*10 to base_id*10+2.
const hotRestartSlots = 3

// sunPathMax is the longest path a unix socket address holds on Linux
// (sizeof(sun_path) 108, less the terminating NUL); Envoy refuses a longer
// one at start ("exceeds maximum UNIX domain socket path size of 108").
const sunPathMax = 107

// HotRestartSocketPrefix is the --socket-path the agent gives Envoy for a
// run folder.
func HotRestartSocketPrefix(runDir string) string {
	return filepath.Join(runDir, hotRestartSocketName)
}

// CheckHotRestartSocketPath fails when the longest hot-restart socket Envoy
// would bind for runDir and baseID does not fit a unix socket address.
func CheckHotRestartSocketPath(runDir string, baseID uint32) error {
	longest := hotRestartSocketFile(HotRestartSocketPrefix(runDir), "udp_parent", baseID, hotRestartSlots-1)
	if len(longest) > sunPathMax {
		over := len(longest) - sunPathMax
		return fmt.Errorf("%s is too long for Envoy's hot-restart sockets: Envoy names them %s (%d bytes, a unix socket path holds %d); use a run folder at most %d bytes long",
			runDir, longest, len(longest), sunPathMax, len(runDir)-over)
	}
	return nil
}

func hotRestartSocketFile(prefix, role string, baseID uint32, slot int) string {
	return prefix + "_" + role + "_" + strconv.FormatUint(uint64(baseID)*BaseIDScale+uint64(slot), 10)
}

// BaseIDScale is Envoy's multiplier from --base-id to the numbers in its
// hot-restart socket and shared memory names.
const BaseIDScale = 10

// HotRestartSocketFiles are every socket file Envoy may bind for prefix and
// baseID.
func HotRestartSocketFiles(prefix string, baseID uint32) []string {
	var files []string
	for slot := range hotRestartSlots {
		for _, role := range hotRestartSocketRoles {
			files = append(files, hotRestartSocketFile(prefix, role, baseID, slot))
		}
	}
	return files
}

// HotRestartSocketBound returns the first of prefix's hot-restart sockets
// that a live process has bound (connecting a datagram socket sends
// nothing; a file left by an Envoy that died refuses the connection, and
// one the agent may not reach is not its Envoy's).
func HotRestartSocketBound(prefix string, baseID uint32) (string, bool) {
	for _, f := range HotRestartSocketFiles(prefix, baseID) {
		if unixgramBound(f) {
			return f, true
		}
	}
	return "", false
}

// unixgramBound reports whether a process has the datagram socket at name
// (a path, or "@" and an abstract name) bound and the agent may reach it.
func unixgramBound(name string) bool {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer syscall.Close(fd)
	return syscall.Connect(fd, &syscall.SockaddrUnix{Name: name}) == nil
}
