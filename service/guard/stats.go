package guard

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// statsFilter names the statistics the guard reads: the HTTP connection
// managers' answers, each cluster's answers, connections, timeouts and
// hosts, and each listener's connections and refusals. Reading only
// these keeps a read cheap for Envoy and the History small whatever the
// bootstrap's size (every cluster has some 150 statistics).
const statsFilter = `^(http\..+\.downstream_rq_(5xx|completed)` +
	`|cluster\..+\.(upstream_rq_(5xx|completed|timeout|per_try_timeout)|upstream_cx_(total|connect_fail|connect_timeout)|membership_(healthy|total))` +
	`|listener\..+\.(downstream_cx_total|no_filter_chain_match|downstream_cx_overflow|downstream_global_cx_overflow))$`

// StatsPath is the admin API request whose answer ParseStats reads.
var StatsPath = "/stats?filter=" + url.QueryEscape(statsFilter)

// Sample is one read of Envoy: its statistics, the addresses it listens
// on, and the operator's URL's answer.
type Sample struct {
	At time.Time
	// Stats are the counters and gauges of StatsPath, by name.
	Stats map[string]uint64
	// Listening are the addresses of Envoy's active listeners, as
	// GET /listeners gives them (host:port).
	Listening []string
	// Probe is the operator's URL's answer at this read; nil when no URL
	// is set or it was not asked.
	Probe *Probe
}

// maxStatsLines bounds what ParseStats reads: far beyond the few
// statistics of StatsPath for a bootstrap of a thousand clusters (8 each).
const maxStatsLines = 200_000

// ParseStats reads the text answer of GET StatsPath: "name: value" lines.
// Values that are not integers (none in StatsPath) are left out.
func ParseStats(body []byte) (map[string]uint64, error) {
	out := map[string]uint64{}
	n := 0
	for line := range strings.Lines(string(body)) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if n++; n > maxStatsLines {
			return nil, fmt.Errorf("stats: more than %d lines", maxStatsLines)
		}
		name, value, ok := strings.Cut(line, ": ")
		if !ok {
			return nil, fmt.Errorf("stats line %d: want \"name: value\", got %q", n, cut(line, 80))
		}
		v, err := strconv.ParseUint(value, 10, 64)
		if err != nil {
			continue
		}
		out[name] = v
	}
	return out, nil
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// gaugeSuffixes end the names of the gauges among the statistics read;
// every other one is a counter.
var gaugeSuffixes = []string{".membership_healthy", ".membership_total"}

func isGauge(name string) bool {
	for _, s := range gaugeSuffixes {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// listenerStatKey is the name Envoy gives a listener's statistics
// (listener.<key>.*) when the listener has no stat_prefix of its own: its
// address with ':' made '_' ("127.0.0.1_8080", "[__1]_8080").
func listenerStatKey(address string) string { return strings.ReplaceAll(address, ":", "_") }
