// Package cli holds what the envoy package, the agent's configuration and
// its control clients need of Envoy's command line: the default drain
// durations and how long a replaced epoch may outlive them, the split of an
// Istio-style log level, and what a binary built without hot restart says
// of itself. It imports nothing of the module, so
// that the configuration package, and with it every client command and
// the man-page generator, does not link the envoy package.
package cli

import (
	"strings"
	"time"
)

// HotRestartDisabled is what `envoy --hot-restart-version` prints for a
// binary built without hot restart (Istio's and AWS's builds turn it off),
// and what /server_info reports for an Envoy run with --disable-hot-restart.
const HotRestartDisabled = "disabled"

// Defaults, matching Istio's where Istio has one.
const (
	DefaultDrainDuration          = 45 * time.Second
	DefaultParentShutdownDuration = 60 * time.Second
)

// ReplacedExitGrace is how long past its parent_shutdown_duration an epoch
// that a hot restart replaced may take to exit (Envoy tells it to exit
// then; it flushes its logs and stats first): a reload waits for it no
// longer, and the reload client's deadline allows for it.
const ReplacedExitGrace = 5 * time.Second

// SplitLogLevel splits an Istio-style level ("info" or
// "warning,upstream:debug,http:trace") into the base level and the
// component part.
func SplitLogLevel(level string) (base, components string) {
	var comps []string
	for _, part := range strings.Split(level, ",") {
		part = strings.TrimSpace(part)
		switch {
		case part == "":
		case strings.Contains(part, ":"):
			comps = append(comps, part)
		default:
			base = part
		}
	}
	return base, strings.Join(comps, ",")
}
