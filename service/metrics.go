//go:build linux

package service

import (
	"bytes"
	"context"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"

	vmetrics "github.com/VictoriaMetrics/metrics"
	"github.com/sirupsen/logrus"

	"github.com/envoy-agent/envoy-agent/envoy"
)

// metricsContentType is the Prometheus text exposition format, version 0.0.4.
const metricsContentType = "text/plain; version=0.0.4; charset=utf-8"

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
//   - envoy_agent_reload_failures_total (counter): reloads refused or failed; the serving epoch kept serving.
//   - envoy_agent_last_reload_seconds (gauge): how long the last reload took, from the request to READY=1.
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

	drainsIncompleteStop    *vmetrics.Counter
	drainsIncompleteRestart *vmetrics.Counter
}

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
		// Both kinds from the start, at 0: an alert on increase() sees the first one.
		drainsIncompleteStop:    set.NewCounter(`envoy_agent_drains_incomplete_total{kind="stop"}`),
		drainsIncompleteRestart: set.NewCounter(`envoy_agent_drains_incomplete_total{kind="restart"}`),
	}
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

// envoyStatsBudget is how long a scrape waits for Envoy's stats: metricsScrapeTimeout, or less
// when Prometheus says its scrape times out sooner (its X-Prometheus-Scrape-Timeout-Seconds
// header): four fifths of that, so that the agent's own metrics (envoy_agent_envoy_live among
// them) still reach Prometheus when Envoy's admin API hangs.
func envoyStatsBudget(h http.Header) time.Duration {
	secs, err := strconv.ParseFloat(h.Get("X-Prometheus-Scrape-Timeout-Seconds"), 64)
	if err != nil || secs <= 0 || math.IsInf(secs, 0) || math.IsNaN(secs) {
		return metricsScrapeTimeout
	}
	return min(metricsScrapeTimeout, time.Duration(secs*0.8*float64(time.Second)))
}

// mergedHandler serves Envoy's /stats/prometheus followed by the agent's own
// metrics, in the Prometheus text format.
func (m *metrics) mergedHandler(admin *envoy.AdminClient, log *logrus.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", metricsContentType)
		ctx, cancel := context.WithTimeout(r.Context(), envoyStatsBudget(r.Header))
		defer cancel()
		if resp, err := admin.Get(ctx, "/stats/prometheus"); err != nil {
			log.Debugf("metrics: %v", err)
		} else {
			if resp.StatusCode == http.StatusOK {
				_, _ = io.Copy(w, resp.Body)
			}
			resp.Body.Close()
		}
		// In one write: WriteProcessMetrics writes line by line.
		var buf bytes.Buffer
		m.writeTo(&buf)
		if _, err := w.Write(buf.Bytes()); err != nil {
			log.Debugf("metrics: write: %v", err)
		}
	})
}
