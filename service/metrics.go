//go:build linux

package service

import (
	"io"
	"strings"
	"sync"

	vmetrics "github.com/VictoriaMetrics/metrics"

	"github.com/envoy-agent/envoy-agent/envoy"
	"github.com/envoy-agent/envoy-agent/envoy/certs"
)

// metrics are the agent's own Prometheus metrics, in a private set (not the
// package's global default one). github.com/VictoriaMetrics/metrics replaced
// Prometheus' client_golang, whose package inits cost every agent start about
// 0.8 ms (perf stat of `envoy-agent --version`). Its metadata is all or
// nothing (vmetrics.ExposeMetadata) and has no help text: each family gets a
// `# TYPE` line and a bare `# HELP name`. What each metric means:
//
//   - envoy_agent_envoy_live (gauge): 1 while Envoy is LIVE and not draining.
//   - envoy_agent_draining (gauge): 1 once a drain has begun.
//   - envoy_agent_envoy_epoch (gauge): the hot-restart epoch of the serving Envoy.
//   - envoy_agent_start_seconds (gauge): seconds from starting Envoy to its admin API answering LIVE.
//   - envoy_agent_drain_seconds (gauge): seconds the current or last drain has run.
//   - envoy_agent_reloads_total (counter): reloads that put a new Envoy epoch in service.
//   - envoy_agent_reloads_in_place_total{outcome="ok"|"failed"} (counter): reloads (with
//     reload_method "auto") that changed listeners and clusters in the serving Envoy, or tried to
//     (Envoy rejected a resource; the previous ones were put back).
//   - envoy_agent_reload_failures_total (counter): reloads refused or failed; the serving epoch kept serving.
//   - envoy_agent_last_reload_seconds (gauge): how long the last reload took, from the request to READY=1.
//   - envoy_agent_reload_rollbacks_total (counter): reloads the reload guard rolled back (agent.reload_guard):
//     the configuration before serves again, and the files on disk are not what Envoy serves.
//   - envoy_agent_config_drift_files (gauge): how many of the agent's TOML and Envoy's bootstrap hold other
//     bytes on disk than the configuration Envoy serves (a reload that failed, was refused or rolled back; an
//     edit not reloaded yet); 0 when the agent cannot tell (after a live upgrade, until the next reload).
//     Read and compared at each scrape.
//   - envoy_agent_drains_incomplete_total{kind="stop"|"restart"} (counter): drains that ran to
//     termination_drain_duration with downstream connections left (cut when Envoy stopped): the drain
//     of a stop, or of a reload that restarts Envoy without hot restart. A stop's is seen only by a
//     scrape in the seconds between the drain's end and the agent's exit.
type metrics struct {
	set          *vmetrics.Set
	live         *vmetrics.Gauge
	draining     *vmetrics.Gauge
	epoch        *vmetrics.Gauge
	startSeconds *vmetrics.Gauge
	drainSeconds *vmetrics.Gauge

	reloads        *vmetrics.Counter
	reloadFailures *vmetrics.Counter
	reloadSeconds  *vmetrics.Gauge

	reloadsInPlace       *vmetrics.Counter
	reloadsInPlaceFailed *vmetrics.Counter
	reloadRollbacks      *vmetrics.Counter

	drainsIncompleteStop    *vmetrics.Counter
	drainsIncompleteRestart *vmetrics.Counter

	certMu    sync.Mutex
	certNames map[string]bool // the expiry gauges registered
}

// certificatesChanged returns what sets the expiry gauges to the
// certificates m has in use, dropping those no longer in use.
func (m *metrics) certificatesChanged(c *certs.Manager) func() {
	return func() {
		m.certMu.Lock()
		defer m.certMu.Unlock()
		now := map[string]bool{}
		for _, cert := range c.Certificates() {
			name := `envoy_agent_certificate_expiry_timestamp_seconds{file="` + labelEscaper.Replace(cert.File) + `"}`
			now[name] = true
			m.set.GetOrCreateGauge(name, nil).Set(float64(cert.NotAfter.Unix()))
		}
		for name := range m.certNames {
			if !now[name] {
				m.set.UnregisterMetric(name)
			}
		}
		m.certNames = now
	}
}

// labelEscaper escapes a Prometheus label value.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func newMetrics() *metrics {
	// Global in the package, but the agent is its only user: `# TYPE` lines for
	// the set and for WriteProcessMetrics's go_* and process_* too.
	vmetrics.ExposeMetadata(true)
	set := vmetrics.NewSet()
	return &metrics{
		set:            set,
		live:           set.NewGauge("envoy_agent_envoy_live", nil),
		draining:       set.NewGauge("envoy_agent_draining", nil),
		epoch:          set.NewGauge("envoy_agent_envoy_epoch", nil),
		startSeconds:   set.NewGauge("envoy_agent_start_seconds", nil),
		drainSeconds:   set.NewGauge("envoy_agent_drain_seconds", nil),
		reloads:        set.NewCounter("envoy_agent_reloads_total"),
		reloadFailures: set.NewCounter("envoy_agent_reload_failures_total"),
		reloadSeconds:  set.NewGauge("envoy_agent_last_reload_seconds", nil),
		// Both outcomes from the start, at 0.
		reloadsInPlace:       set.NewCounter(`envoy_agent_reloads_in_place_total{outcome="ok"}`),
		reloadsInPlaceFailed: set.NewCounter(`envoy_agent_reloads_in_place_total{outcome="failed"}`),
		reloadRollbacks:      set.NewCounter("envoy_agent_reload_rollbacks_total"),
		// Both kinds from the start, at 0: an alert on increase() sees the first one.
		drainsIncompleteStop:    set.NewCounter(`envoy_agent_drains_incomplete_total{kind="stop"}`),
		drainsIncompleteRestart: set.NewCounter(`envoy_agent_drains_incomplete_total{kind="restart"}`),
	}
}

// countDrift registers envoy_agent_config_drift_files, asked of drifted at
// each scrape.
func (m *metrics) countDrift(drifted func() int) {
	m.set.NewGauge("envoy_agent_config_drift_files", func() float64 { return float64(drifted()) })
}

// drainEnded counts a drain that ended at its bound with connections left.
func (m *metrics) drainEnded(c *vmetrics.Counter, p envoy.DrainProgress) {
	if p.Done && p.AtBound && p.ActiveConnections > 0 {
		c.Inc()
	}
}

// writeTo writes the agent's metrics, then the Go runtime's and the process's
// (go_*, process_*, process_open_fds and process_max_fds among them).
func (m *metrics) writeTo(w io.Writer) {
	m.set.WritePrometheus(w)
	vmetrics.WriteProcessMetrics(w)
	vmetrics.WriteFDMetrics(w)
}
