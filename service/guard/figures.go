package guard

import (
	"fmt"
	"time"
)

// Figures are Envoy's traffic over a span: the counters' increases, and
// the gauges, listeners and URL answer at its end.
type Figures struct {
	Span time.Duration
	// Downstream is the 5xx answers of every HTTP connection manager but
	// the admin's.
	Downstream Share
	// Clusters are by cluster name: every cluster Envoy has at the end.
	Clusters map[string]Cluster
	// Listeners are by statistics key (the address with ':' made '_', or
	// a listener's stat_prefix): every listener that counted a connection
	// over the span, or listens at its end.
	Listeners map[string]Listener
	// Probe is the URL's answer at the end; nil without a URL.
	Probe *Probe
}

// Share is Part of Of: failures of the requests or connections counted.
type Share struct{ Part, Of uint64 }

// Ratio is Part/Of, 0 when Of is, at most 1.
func (s Share) Ratio() float64 {
	if s.Of == 0 {
		return 0
	}
	return min(float64(s.Part)/float64(s.Of), 1)
}

func (s Share) text(what string) string {
	return fmt.Sprintf("%s of %d %s", percent(s.Ratio()), s.Of, what)
}

// percent writes r as a percentage with one decimal, none when whole.
func percent(r float64) string {
	s := fmt.Sprintf("%.1f%%", 100*r)
	if len(s) > 3 && s[len(s)-3:] == ".0%" {
		s = s[:len(s)-3] + "%"
	}
	return s
}

// Cluster is one cluster's traffic.
type Cluster struct {
	// Answers are the 5xx answers (Envoy's own 503 for a connection that
	// failed included) of the requests that completed.
	Answers Share
	// Connects are the connection attempts that failed or timed out.
	Connects Share
	// Timeouts are the requests that timed out (route timeout, per try).
	Timeouts Share
	// Healthy and Hosts are the membership gauges at the span's end.
	Healthy, Hosts uint64
}

// Listener is one listener's connections.
type Listener struct {
	// Address is where it listens (or its statistics key when it has a
	// stat_prefix of its own).
	Address string
	// Listening is whether the address is among Envoy's active listeners
	// at the span's end.
	Listening bool
	// Refused are the connections Envoy accepted and closed at once (no
	// filter chain matched, a connection limit) of all it accepted.
	Refused Share
}
