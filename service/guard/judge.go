package guard

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// The defaults of Thresholds.
//
// With a background of 1 % 5xx answers, the share measured over n
// requests rises by DefaultErrorRise (to 11 %) with a chance of 1.3e-5
// at n = 50 (6 failures or more, binomial), and less with more requests;
// a Window judges each read against the requests since the reload, and a
// signal must be over its threshold FailuresInARow reads in a row, so a
// good reload is not rolled back for its background (TestBackgroundNeverFires).
// A route to a cluster that refuses connections answers 5xx to every
// request (a rise of up to 100 points); a rise of 10 points is far from
// either.
const (
	DefaultErrorRise    = 0.1
	DefaultMinRequests  = 50
	DefaultHealthyShare = 0.5
)

// Thresholds say what is a regression.
type Thresholds struct {
	// ErrorRise is the rise of a share of failures (5xx answers, failed
	// connection attempts, timeouts, refused connections) over its share
	// before the reload that is a regression: 0.1 is 10 points.
	ErrorRise float64
	// MinRequests is how many requests (connections, connection attempts)
	// a share must count since the reload before it is judged, and before
	// the reload for its share then to be compared with; a listener must
	// have taken as many connections before the reload for its going away
	// to count.
	MinRequests uint64
	// HealthyShare is the share of a cluster's healthy hosts that must stay
	// healthy: a cluster that had some before the reload and has fewer than
	// this share of them after regressed.
	HealthyShare float64
}

// DefaultThresholds are the Thresholds of an empty configuration.
func DefaultThresholds() Thresholds {
	return Thresholds{ErrorRise: DefaultErrorRise, MinRequests: DefaultMinRequests, HealthyShare: DefaultHealthyShare}
}

// Signal is one kind of regression.
type Signal string

// The signals.
const (
	// Downstream5xx: the share of 5xx answers of every HTTP connection
	// manager rose.
	Downstream5xx Signal = "downstream_5xx"
	// Upstream5xx: the share of a cluster's 5xx answers rose.
	Upstream5xx Signal = "upstream_5xx"
	// ConnectFailures: the share of a cluster's connection attempts that
	// failed or timed out rose.
	ConnectFailures Signal = "connect_failures"
	// Timeouts: the share of a cluster's requests that timed out rose.
	Timeouts Signal = "timeouts"
	// HealthyHosts: a cluster lost healthy hosts.
	HealthyHosts Signal = "healthy_hosts"
	// ListenerGone: an address that took connections no longer listens.
	ListenerGone Signal = "listener_gone"
	// ListenerRefused: the share of a listener's connections closed at
	// once (no filter chain matched, a limit) rose.
	ListenerRefused Signal = "listener_refused"
	// URL: the operator's URL stopped answering 2xx.
	URL Signal = "url"
)

// Finding is a signal over its threshold, with its figures.
type Finding struct {
	Signal Signal `json:"signal"`
	// Subject is the cluster, the listener's address or the URL; "" for
	// Downstream5xx.
	Subject string `json:"subject,omitempty"`
	// Before and After are the figures that show it, as text ("0.4% of
	// 2410 requests", "3 of 3 hosts healthy").
	Before string `json:"before"`
	After  string `json:"after"`
}

// String is the finding as the log and the status give it.
func (f Finding) String() string {
	return fmt.Sprintf("%s: %s before the reload, %s after", f.what(), f.Before, f.After)
}

func (f Finding) what() string {
	switch f.Signal {
	case Downstream5xx:
		return "5xx answers"
	case Upstream5xx:
		return fmt.Sprintf("cluster %s: 5xx answers", f.Subject)
	case ConnectFailures:
		return fmt.Sprintf("cluster %s: failed connection attempts", f.Subject)
	case Timeouts:
		return fmt.Sprintf("cluster %s: timed-out requests", f.Subject)
	case HealthyHosts:
		return fmt.Sprintf("cluster %s: healthy hosts", f.Subject)
	case ListenerGone:
		return fmt.Sprintf("listener %s", f.Subject)
	case ListenerRefused:
		return fmt.Sprintf("listener %s: connections closed at once", f.Subject)
	case URL:
		return f.Subject
	}
	return string(f.Signal)
}

// key tells a finding's signal and subject from the others', for counting
// the reads in a row it was over its threshold.
func (f Finding) key() string { return string(f.Signal) + " " + f.Subject }

// Judge compares the traffic after a reload with the traffic before it
// and returns each signal over its threshold, most telling first: the
// downstream answers, each cluster's answers, connections, timeouts and
// hosts, each listener. It is one read's judgement; a Window asks for it
// FailuresInARow times before it calls a regression.
func Judge(th Thresholds, before, after Figures) []Finding {
	var out []Finding
	if f, ok := th.rose(Downstream5xx, "", before.Downstream, after.Downstream, "requests"); ok {
		out = append(out, f)
	}
	for _, name := range sortedKeys(after.Clusters) {
		a, b := after.Clusters[name], before.Clusters[name]
		for _, s := range []struct {
			signal        Signal
			before, after Share
			what          string
		}{
			{Upstream5xx, b.Answers, a.Answers, "requests"},
			{ConnectFailures, b.Connects, a.Connects, "connection attempts"},
			{Timeouts, b.Timeouts, a.Timeouts, "requests"},
		} {
			if f, ok := th.rose(s.signal, name, s.before, s.after, s.what); ok {
				out = append(out, f)
			}
		}
		if b.Healthy > 0 && float64(a.Healthy) < th.HealthyShare*float64(b.Healthy) {
			out = append(out, Finding{Signal: HealthyHosts, Subject: name,
				Before: fmt.Sprintf("%d of %d hosts healthy", b.Healthy, b.Hosts), After: fmt.Sprintf("%d of %d hosts healthy", a.Healthy, a.Hosts)})
		}
	}
	for _, key := range sortedKeys(before.Listeners) {
		b := before.Listeners[key]
		if b.Listening && b.Refused.Of >= th.MinRequests && !after.Listeners[key].Listening {
			out = append(out, Finding{Signal: ListenerGone, Subject: b.Address,
				Before: fmt.Sprintf("listening, %d connections over %s", b.Refused.Of, before.Span.Round(time.Second)), After: "not listening"})
		}
	}
	for _, key := range sortedKeys(after.Listeners) {
		a := after.Listeners[key]
		if f, ok := th.rose(ListenerRefused, a.Address, before.Listeners[key].Refused, a.Refused, "connections"); ok {
			out = append(out, f)
		}
	}
	return out
}

// rose says whether after's share is ErrorRise above before's: after
// counts MinRequests at least, and before's share counts only when it
// counts as many (else before is taken as 0).
func (th Thresholds) rose(s Signal, subject string, before, after Share, what string) (Finding, bool) {
	if after.Of < th.MinRequests || after.Of == 0 {
		return Finding{}, false
	}
	base, bt := 0.0, before.text(what)
	if before.Of >= th.MinRequests && before.Of > 0 {
		base = before.Ratio()
	} else {
		bt += " (too few to compare)"
	}
	if after.Ratio()-base < th.ErrorRise-ratioSlack {
		return Finding{}, false
	}
	return Finding{Signal: s, Subject: subject, Before: bt, After: after.text(what)}, true
}

// ratioSlack absorbs the rounding of float64 shares: 30 of 100 after 200
// of 1000 is a rise of 0.1, computed as 0.09999999999999998.
const ratioSlack = 1e-9

// judged says, for the log of a window that ended, what the guard could
// judge: the shares that counted MinRequests.
func (th Thresholds) judged(after Figures) string {
	var parts []string
	if after.Downstream.Of >= th.MinRequests {
		parts = append(parts, "5xx answers "+after.Downstream.text("requests"))
	}
	n := 0
	for _, c := range after.Clusters {
		if c.Answers.Of >= th.MinRequests || c.Healthy > 0 {
			n++
		}
	}
	if n > 0 {
		parts = append(parts, fmt.Sprintf("%d clusters", n))
	}
	if len(parts) == 0 {
		return fmt.Sprintf("too little traffic to judge the answers (%d requests, %d needed)", after.Downstream.Of, th.MinRequests)
	}
	return strings.Join(parts, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
