// Package childenv builds the environment of a process that a systemd
// service starts: it leaves out the variables systemd sets for the
// service's main process alone, so that a child (Envoy) never answers on
// the service's notify socket or takes its passed sockets.
package childenv

import (
	"slices"
	"strings"
)

// ServiceOnly are the variables systemd sets for the main process alone.
var ServiceOnly = []string{"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"}

// Clean returns env without ServiceOnly, followed by extra.
func Clean(env []string, extra ...string) []string {
	out := make([]string, 0, len(env)+len(extra))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(ServiceOnly, k) {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}
