//go:build linux

package service

import (
	"fmt"
	"net"
	"os/user"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/envoy-agent/envoy-agent/internal/hostfiles"
	"github.com/envoy-agent/envoy-agent/service/claims"
	"github.com/envoy-agent/envoy-agent/service/config"
)

// Envoy's own messages for start failures an operator fixes in the files,
// as Envoy 1.40 prints them (provoked with the real Envoy: a second Envoy
// with the same --base-id, a taken admin or listener port with
// enable_reuse_port false, a missing or unreadable file named in the
// bootstrap). Compiled at the first failed start, not at every start.
var (
	baseIDClashRE = lazyRegexp(`unable to bind domain socket with base_id=(\d+), id=\d+, errno=98`)
	portInUseRE   = lazyRegexp(`cannot bind '([^']+)': Address already in use`)
	listenerRE    = lazyRegexp(`listener '([^']+)' failed to bind`)
	shmExistsRE   = lazyRegexp(`cannot open shared memory region /envoy_shared_memory_(\d+) .*File exists`)
	unreadableRE  = lazyRegexp("(?:unable to read file: |Invalid path: |unable to open file ')([^'`\\s]+)")
)

// lazyRegexp is a regular expression compiled at its first use.
func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

// startHints returns, for each of Envoy's last lines, a sentence saying what
// to change in the configuration, or "" when the line needs none. A hint is
// given once, beside the last line that calls for it (Envoy repeats its
// error at the end).
func startHints(cfg *config.Config, lines []string) []string {
	hints := make([]string, len(lines))
	seen := map[string]bool{}
	listener := ""
	for _, l := range lines {
		if m := listenerRE().FindStringSubmatch(l); m != nil {
			listener = m[1]
		}
	}
	for i := len(lines) - 1; i >= 0; i-- {
		h := startHint(cfg, lines[i], listener)
		if h == "" || seen[h] {
			continue
		}
		seen[h] = true
		hints[i] = h
	}
	return hints
}

func startHint(cfg *config.Config, line, listener string) string {
	if m := baseIDClashRE().FindStringSubmatch(line); m != nil {
		id, _ := strconv.ParseUint(m[1], 10, 32)
		who := "another Envoy on this host"
		if holder, held := claims.AgentOnBaseID(uint32(id)); held {
			who = "the Envoy of " + holder
		}
		return fmt.Sprintf("base_id %d is used by %s: set envoy.base_id in %s to a base_id of its own (%d is free)", id, who, cfg.File, claims.FreeBaseID(uint32(id)))
	}
	if m := shmExistsRE().FindStringSubmatch(line); m != nil {
		n, _ := strconv.ParseUint(m[1], 10, 32)
		id := uint32(n / hostfiles.BaseIDScale)
		owner := hostfiles.SharedMemoryOwner(id)
		if owner == "" {
			owner = hostfiles.SharedMemoryPath(id) + " existed"
		}
		return fmt.Sprintf("%s: Envoy's hot-restart shared memory for base_id %d was made by another process before this Envoy started; remove it (as root) or set envoy.base_id in %s to another value (%d is free)", owner, id, cfg.File, claims.FreeBaseID(id))
	}
	if m := portInUseRE().FindStringSubmatch(line); m != nil {
		who := "another process"
		_, portText, _ := net.SplitHostPort(m[1])
		port, err := strconv.ParseUint(portText, 10, 16)
		if err == nil {
			if holder, ok := claims.AgentOnPort(config.Port(port)); ok {
				who = holder
			}
		}
		if err == nil && config.Port(port) == cfg.Envoy.AdminPort {
			return fmt.Sprintf("Envoy's admin address %s is in use by %s: change envoy.admin_port in %s and the admin address in %s to a free port", m[1], who, cfg.File, cfg.Envoy.ConfigPath)
		}
		what := "a listener"
		if listener != "" {
			what = fmt.Sprintf("listener %q", listener)
		}
		return fmt.Sprintf("%s %s is in use by %s: change that listener's port in %s (envoy.config_path), or stop the other process", m[1], what, who, cfg.Envoy.ConfigPath)
	}
	if m := unreadableRE().FindStringSubmatch(line); m != nil {
		return fmt.Sprintf("Envoy (running as %s) cannot open %s, named in %s (envoy.config_path): fix the path there, or make the file readable (writable, for a log) by that user; under the unit only /run/envoy-agent* is writable (add LogsDirectory= for logs)", currentUser(), m[1], cfg.Envoy.ConfigPath)
	}
	return ""
}

func currentUser() string {
	if u, err := user.Current(); err == nil {
		return "user " + u.Username
	}
	return "this user"
}

// withHints writes Envoy's lines with each hint on the line after the one
// it explains.
func withHints(lines, hints []string) string {
	var b strings.Builder
	for i, l := range lines {
		if i > 0 {
			b.WriteString("\n  ")
		}
		b.WriteString(l)
		if i < len(hints) && hints[i] != "" {
			b.WriteString("\n  -> " + hints[i])
		}
	}
	return b.String()
}
