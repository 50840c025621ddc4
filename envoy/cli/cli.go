// Package cli holds what the envoy package and the agent's configuration
// both need of Envoy's command line: the default drain durations and the
// split of an Istio-style log level. It imports nothing of the module, so
// that the configuration package, and with it every client command and
// the man-page generator, does not link the envoy package.
package cli

import (
	"strings"
	"time"
)

// Defaults, matching Istio's where Istio has one.
const (
	DefaultDrainDuration          = 45 * time.Second
	DefaultParentShutdownDuration = 60 * time.Second
)

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
