package guard

import (
	"maps"
	"strings"
	"time"
)

// BaselineSpan is how far before a reload the baseline reaches: the
// minutes before, long enough to count a few hundred requests at a
// request a second, short enough to forget an incident that is over.
const BaselineSpan = 5 * time.Minute

// checkpointEvery is how often a History keeps a copy of its totals for
// the baseline: 30 copies over BaselineSpan instead of one a read.
const checkpointEvery = 10 * time.Second

// History is what the guard keeps of Envoy's reads: each counter's
// increase since the first read, corrected for the resets of a new Envoy
// process, the latest gauges, listeners and URL answer, and checkpoints
// over the last BaselineSpan. One goroutine owns it: the one that reads.
type History struct {
	started   bool
	last      map[string]uint64 // each counter's latest value, kept when it vanishes from a read
	totals    map[string]uint64 // each counter's increase since the first read
	now       Mark              // the latest read (its totals are totals)
	marks     []Mark            // checkpoints, oldest first, none older than BaselineSpan
	addresses map[string]string // listener stat key -> address, of every address seen listening
}

// Mark is the History at one read.
type Mark struct {
	At        time.Time
	totals    map[string]uint64
	gauges    map[string]uint64
	listening map[string]bool // listener stat keys
	probe     *Probe
}

// NewHistory returns an empty History.
func NewHistory() *History {
	return &History{last: map[string]uint64{}, totals: map[string]uint64{}, addresses: map[string]string{}}
}

// Add takes one read. A counter's increase is its rise since the previous
// read; a counter seen for the first time after the first read counts
// from 0 (Envoy creates some at their first use: a cluster's
// upstream_rq_5xx appears with the first 5xx answer); one that went down
// was reset (a new Envoy process) and counts from 0 again. A counter that
// vanishes and comes back with the value it had adds nothing: after a
// hot restart the new epoch carries the old one's counters on.
func (h *History) Add(s Sample) {
	gauges := map[string]uint64{}
	for name, v := range s.Stats {
		if isGauge(name) {
			gauges[name] = v
			continue
		}
		prev, seen := h.last[name]
		switch {
		case !h.started:
			h.totals[name] = 0
		case !seen || v < prev:
			h.totals[name] += v
		default:
			h.totals[name] += v - prev
		}
		h.last[name] = v
	}
	h.started = true
	listening := map[string]bool{}
	for _, a := range s.Listening {
		k := listenerStatKey(a)
		listening[k] = true
		h.addresses[k] = a
	}
	h.now = Mark{At: s.At, totals: h.totals, gauges: gauges, listening: listening, probe: s.Probe}
	if n := len(h.marks); n == 0 || s.At.Sub(h.marks[n-1].At) >= checkpointEvery {
		h.marks = append(h.marks, h.Mark())
	}
	for len(h.marks) > 1 && s.At.Sub(h.marks[0].At) > BaselineSpan {
		h.marks = h.marks[1:]
	}
}

// Latest is when the latest read was taken; zero before any.
func (h *History) Latest() time.Time { return h.now.At }

// Mark is a copy of the History now, for a Window to count from.
func (h *History) Mark() Mark {
	m := h.now
	m.totals = maps.Clone(h.totals)
	return m
}

// Baseline is the traffic of the last BaselineSpan (less when the History
// is younger), with the gauges, listeners and URL answer of the latest
// read.
func (h *History) Baseline() Figures {
	if len(h.marks) == 0 {
		return Figures{}
	}
	return h.figures(h.marks[0], h.now)
}

// Since is the traffic since m, with the latest read's gauges and
// listeners.
func (h *History) Since(m Mark) Figures { return h.figures(m, h.now) }

// figures counts what happened between from and to.
func (h *History) figures(from, to Mark) Figures {
	inc := func(name string) uint64 { return to.totals[name] - from.totals[name] }
	f := Figures{Span: to.At.Sub(from.At), Clusters: map[string]Cluster{}, Listeners: map[string]Listener{}}
	for name := range to.totals {
		if p, ok := statScope(name, "http.", ".downstream_rq_completed"); ok && p != "admin" {
			f.Downstream.Of += inc(name)
			f.Downstream.Part += inc("http." + p + ".downstream_rq_5xx")
		}
		if k, ok := statScope(name, "listener.", ".downstream_cx_total"); ok && isListenerKey(k) {
			l := "listener." + k + "."
			f.Listeners[k] = Listener{Address: h.address(k), Listening: to.listening[k],
				Refused: Share{Part: inc(l+"no_filter_chain_match") + inc(l+"downstream_cx_overflow") + inc(l+"downstream_global_cx_overflow"),
					Of: inc(name)}}
		}
	}
	for k := range to.listening {
		if _, ok := f.Listeners[k]; !ok {
			f.Listeners[k] = Listener{Address: h.address(k), Listening: true}
		}
	}
	for name, hosts := range to.gauges {
		c, ok := statScope(name, "cluster.", ".membership_total")
		if !ok {
			continue
		}
		p := "cluster." + c + "."
		f.Clusters[c] = Cluster{
			Answers:  Share{Part: inc(p + "upstream_rq_5xx"), Of: inc(p + "upstream_rq_completed")},
			Connects: Share{Part: inc(p+"upstream_cx_connect_fail") + inc(p+"upstream_cx_connect_timeout"), Of: inc(p + "upstream_cx_total")},
			Timeouts: Share{Part: inc(p+"upstream_rq_timeout") + inc(p+"upstream_rq_per_try_timeout"), Of: inc(p + "upstream_rq_completed")},
			Healthy:  to.gauges[p+"membership_healthy"],
			Hosts:    hosts,
		}
	}
	f.Probe = to.probe
	return f
}

// address is the listener's address for its stat key, or the key when it
// was never seen listening (a listener with a stat_prefix of its own).
func (h *History) address(key string) string {
	if a, ok := h.addresses[key]; ok {
		return a
	}
	return key
}

// statScope is the part of name between prefix and suffix.
func statScope(name, prefix, suffix string) (string, bool) {
	if !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, suffix) || len(name) <= len(prefix)+len(suffix) {
		return "", false
	}
	return name[len(prefix) : len(name)-len(suffix)], true
}

// isListenerKey tells a listener's own statistics from the admin's and
// from the per-worker copies (listener.<key>.worker_N.*).
func isListenerKey(k string) bool {
	if k == "admin" || strings.HasPrefix(k, "admin.") || strings.HasPrefix(k, "envoy_internal_") {
		return false
	}
	last := k[strings.LastIndexByte(k, '.')+1:]
	return !strings.HasPrefix(last, "worker_") && last != "main_thread"
}
