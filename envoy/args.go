//go:build linux

package envoy

import (
	"net/netip"
	"slices"
	"strconv"

	"github.com/envoy-agent/envoy-agent/envoy/cli"
	"github.com/envoy-agent/envoy-agent/internal/hostfiles"
)

// jsonLogFormat is Envoy's --log-format for LogAsJSON: one JSON object a line,
// with the message JSON-escaped by Envoy (%j).
const jsonLogFormat = `{"level":"%l","time":"%Y-%m-%dT%T.%fZ","scope":"%n","msg":"%j","caller":"%g:%#","thread":%t}`

// args builds Envoy's command line (without the binary) for the given
// hot-restart epoch, admin address file and hot-restart socket prefix ("":
// Envoy's abstract sockets, for epochs of an agent that ran them so).
func (c ProxyConfig) args(epoch int, adminAddressPath, hotRestartSocket string) []string {
	a := []string{
		"-c", c.ConfigPath,
		"--drain-time-s", seconds(durationOr(c.DrainDuration, DefaultDrainDuration).Seconds()),
		"--drain-strategy", "immediate",
		"--local-address-ip-version", ipVersion(c.NodeIPs),
		"--file-flush-interval-msec", strconv.FormatInt(defaultFileFlushInterval.Milliseconds(), 10),
	}
	if c.DisableHotRestart {
		a = append(a, "--disable-hot-restart")
	} else {
		a = append(a,
			"--base-id", strconv.FormatUint(uint64(c.BaseID), 10),
			"--restart-epoch", strconv.Itoa(epoch),
			"--parent-shutdown-time-s", seconds(durationOr(c.ParentShutdownDuration, DefaultParentShutdownDuration).Seconds()),
		)
		if hotRestartSocket != "" {
			// Files private to the agent's user, not abstract names any
			// local user can reach (hostfiles.HotRestartSocketPrefix).
			a = append(a, "--socket-path", hotRestartSocket, "--socket-mode", hostfiles.HotRestartSocketMode)
		}
	}
	if adminAddressPath != "" {
		a = append(a, "--admin-address-path", adminAddressPath)
	}
	level, components := SplitLogLevel(c.LogLevel)
	if level != "" {
		a = append(a, "-l", level)
	}
	if components == "" {
		components = c.ComponentLogLevel
	}
	if components != "" {
		a = append(a, "--component-log-level", components)
	}
	if c.LogAsJSON {
		a = append(a, "--log-format", jsonLogFormat)
	}
	if c.Concurrency > 0 {
		a = append(a, "--concurrency", strconv.Itoa(int(c.Concurrency)))
	}
	return append(a, c.ExtraArgs...)
}

// strictResources adds --reject-unknown-dynamic-fields to the command line
// of an epoch that runs the bootstrap's resources from files: Envoy reads
// a static bootstrap strictly (an unknown field or enum value fails the
// start) but xDS leniently (it warns and ignores them), so a cluster with
// `type: NOT_A_TYPE` that fails as a static resource was taken, with its
// type ignored, from the CDS file. An operator's own choice in extra_args
// is kept.
func strictResources(args []string) []string {
	if slices.Contains(args, "--ignore-unknown-dynamic-fields") || slices.Contains(args, "--reject-unknown-dynamic-fields") {
		return args
	}
	return append(args, "--reject-unknown-dynamic-fields")
}

// seconds renders a whole number of seconds, rounding a fraction up so that a
// configured duration is never shortened.
func seconds(s float64) string {
	n := int64(s)
	if float64(n) < s {
		n++
	}
	return strconv.FormatInt(n, 10)
}

// ipVersion is "v6" only when there is at least one node IP and every one is
// IPv6; anything unparsable counts as not IPv6.
func ipVersion(nodeIPs []string) string {
	if len(nodeIPs) == 0 {
		return "v4"
	}
	for _, s := range nodeIPs {
		ip, err := netip.ParseAddr(s)
		if err != nil || !ip.Is6() || ip.Is4In6() {
			return "v4"
		}
	}
	return "v6"
}

// SplitLogLevel splits an Istio-style level ("info" or
// "warning,upstream:debug,http:trace") into the base level and the
// component part.
func SplitLogLevel(level string) (base, components string) { return cli.SplitLogLevel(level) }

// SameCommandLine reports whether a and b run the same binary path with the
// same command line: an in-place reload cannot change either.
func SameCommandLine(a, b ProxyConfig) bool {
	return a.BinaryPath == b.BinaryPath && slices.Equal(a.args(0, "", ""), b.args(0, "", ""))
}
