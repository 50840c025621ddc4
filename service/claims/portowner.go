//go:build linux

package claims

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/envoy-agent/envoy-agent/service/config"
)

// Listen binds host:port for the agent's server of configuration key key.
// A port that is taken fails with the key and who holds it: another
// envoy-agent (a configuration error naming it), else the owner /proc tells.
func Listen(cfg *config.Config, key, host string, port config.Port) (net.Listener, error) {
	ln, err := listenTCP(key, host, port)
	if err != nil {
		return nil, portInUse(cfg, key, port, err)
	}
	return ln, nil
}

// portInUse wraps the error of binding one of the agent's own ports; when
// another envoy-agent holds the port, it is a configuration error naming it.
func portInUse(cfg *config.Config, key string, port config.Port, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		if holder, ok := otherAgent(portClaim(port)); ok {
			return config.Problemf(cfg, key, "port %d is already used by %s: give this instance a %s of its own", port, holder, key)
		}
	}
	return err
}

// listenTCP binds host:port for one of the agent's servers. A port that is
// taken fails with the key, and with who holds the port when /proc tells.
func listenTCP(key, host string, port config.Port) (net.Listener, error) {
	addr := net.JoinHostPort(host, strconv.Itoa(int(port)))
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		return ln, nil
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("%s: %s is already taken by %s: %w", key, addr, portHolder(uint16(port)), err)
	}
	return nil, fmt.Errorf("%s: %w", key, err)
}

// portHolder describes who listens on TCP port: the uid from
// /proc/net/tcp{,6}, and the process when its file descriptors are
// visible to the agent (root sees all).
func portHolder(port uint16) string {
	uid, inode, ok := listeningSocket(port)
	if !ok {
		return "another process (not found in /proc/net/tcp)"
	}
	who := "uid " + uid
	if u, err := user.LookupId(uid); err == nil {
		who += " (" + u.Username + ")"
	}
	if pid, comm, ok := socketProcess(inode); ok {
		return fmt.Sprintf("%s, pid %d (%s)", who, pid, comm)
	}
	return who + ", a process the agent cannot see"
}

// listeningSocket finds the listening socket on port in /proc/net/tcp and
// /proc/net/tcp6, and returns its owner's uid and its inode.
func listeningSocket(port uint16) (uid, inode string, ok bool) {
	want := fmt.Sprintf(":%04X", port)
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fs := strings.Fields(sc.Text())
			if len(fs) < 10 || fs[3] != "0A" || !strings.HasSuffix(fs[1], want) {
				continue
			}
			f.Close()
			return fs[7], fs[9], true
		}
		f.Close()
	}
	return "", "", false
}

// socketProcess finds a process holding the socket inode.
func socketProcess(inode string) (int, string, bool) {
	link := "socket:[" + inode + "]"
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		if target, err := os.Readlink(fd); err != nil || target != link {
			continue
		}
		pidDir := filepath.Dir(filepath.Dir(fd))
		pid, _ := strconv.Atoi(filepath.Base(pidDir))
		comm, _ := os.ReadFile(filepath.Join(pidDir, "comm"))
		return pid, strings.TrimSpace(string(comm)), true
	}
	return 0, "", false
}
