//go:build linux

// The check that Envoy's admin is where the configuration says (a loopback
// port or a private unix socket), from the address Envoy writes to
// --admin-address-path.

package envoy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/safefile"
)

func (e *Envoy) adminAddressPath(epoch int) string {
	if e.runDir == "" {
		return ""
	}
	return filepath.Join(e.runDir, "admin-address-epoch-"+strconv.Itoa(epoch))
}

// createAdminAddressFile makes the empty file Envoy writes its admin
// address to, exclusively and never through a symbolic link, private to
// the agent's user; Envoy then writes into this file rather than create
// one of its own.
func createAdminAddressFile(path string) error {
	if path == "" {
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("envoy admin address file: %w", err)
	}
	if err := safefile.CreatePrivate(path, nil); err != nil {
		return fmt.Errorf("envoy admin address file: %w", err)
	}
	return nil
}

// AdminAddressError reports an admin listener that is not where the
// configuration says it must be.
type AdminAddressError struct {
	Address    string // what Envoy bound: host:port, or a unix socket's path
	WantPort   int32
	WantSocket string // the unix socket it must be on, when one is configured
	NotLocal   bool   // bound beyond loopback without the opt-in
	WrongPort  bool
	WrongKind  bool // a unix socket where a port was configured, or the reverse
}

func (e *AdminAddressError) Error() string {
	var parts []string
	switch {
	case e.WrongKind && e.WantSocket != "":
		parts = append(parts, fmt.Sprintf("Envoy's admin listener is on %s, not on the unix socket %s: the bootstrap's admin address and the agent's admin socket must agree", e.Address, e.WantSocket))
	case e.WrongKind:
		parts = append(parts, fmt.Sprintf("Envoy's admin listener is on the unix socket %s, not on port %d: set the agent's admin socket to that path", e.Address, e.WantPort))
	case e.WantSocket != "":
		parts = append(parts, fmt.Sprintf("Envoy's admin listener is on the unix socket %s, not on %s: the bootstrap's admin address and the agent's admin socket must agree", e.Address, e.WantSocket))
	}
	if e.WrongPort {
		parts = append(parts, fmt.Sprintf("Envoy's admin listener is on %s, not on port %d: the bootstrap's admin address and the agent's admin port must agree", e.Address, e.WantPort))
	}
	if e.NotLocal {
		parts = append(parts, fmt.Sprintf("Envoy's admin listener is on %s, which is reachable beyond this host; bind it to 127.0.0.1 (or opt in to a remote admin)", e.Address))
	}
	return strings.Join(parts, "; ")
}

// checkAdminAddress waits for Envoy to write its admin address and checks it
// against the configuration. It returns nil when Envoy exits first.
func (e *Envoy) checkAdminAddress(p *process) error {
	if p.adminAddressPath == "" {
		return nil
	}
	tick := time.NewTicker(epochPoll)
	defer tick.Stop()
	for {
		b, err := os.ReadFile(p.adminAddressPath)
		if err == nil && len(strings.TrimSpace(string(b))) > 0 {
			return checkAdminAddress(strings.TrimSpace(string(b)), e.config())
		}
		select {
		case <-p.done:
			return nil
		case <-tick.C:
		}
	}
}

// checkAdminAddress checks the admin address Envoy wrote: host:port for a
// TCP listener, the path for a unix socket (relative to the working
// folder Envoy shares with the agent, when the bootstrap's is).
func checkAdminAddress(addr string, cfg ProxyConfig) error {
	host, port, err := net.SplitHostPort(addr)
	isSocket := err != nil
	ae := &AdminAddressError{Address: addr, WantPort: cfg.AdminPort, WantSocket: cfg.AdminSocket}
	switch {
	case isSocket && cfg.AdminSocket == "":
		ae.WrongKind = true
	case isSocket:
		if abs, err := filepath.Abs(addr); err != nil || abs != filepath.Clean(cfg.AdminSocket) {
			return ae
		}
		return nil
	case cfg.AdminSocket != "":
		ae.WrongKind = true
	default:
		if port != strconv.Itoa(int(cfg.AdminPort)) {
			ae.WrongPort = true
		}
		ip, err := netip.ParseAddr(host)
		if !cfg.AllowRemoteAdmin && (err != nil || !ip.IsLoopback()) {
			ae.NotLocal = true
		}
	}
	if ae.WrongKind || ae.WrongPort || ae.NotLocal {
		return ae
	}
	return nil
}
