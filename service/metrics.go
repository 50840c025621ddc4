//go:build linux

package service

import (
	"bytes"
	"context"
	"io"
	"net/http"

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
	}
}

// writeTo writes the agent's metrics, then the Go runtime's and the process's
// (go_*, process_*, process_open_fds and process_max_fds among them).
func (m *metrics) writeTo(w io.Writer) {
	m.set.WritePrometheus(w)
	vmetrics.WriteProcessMetrics(w)
	vmetrics.WriteFDMetrics(w)
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
		ctx, cancel := context.WithTimeout(r.Context(), metricsScrapeTimeout)
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
