//go:build linux

package service

import (
	"context"
	"io"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"
	"github.com/sirupsen/logrus"

	"github.com/envoy-agent/envoy-agent/envoy"
)

// metrics are the agent's own Prometheus metrics.
type metrics struct {
	reg          *prometheus.Registry
	live         prometheus.Gauge
	draining     prometheus.Gauge
	epoch        prometheus.Gauge
	startSeconds prometheus.Gauge
	drainSeconds prometheus.Gauge

	reloads        prometheus.Counter
	reloadFailures prometheus.Counter
	reloadSeconds  prometheus.Gauge
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		live: prometheus.NewGauge(prometheus.GaugeOpts{Name: "envoy_agent_envoy_live",
			Help: "1 while Envoy is LIVE and not draining."}),
		draining: prometheus.NewGauge(prometheus.GaugeOpts{Name: "envoy_agent_draining",
			Help: "1 once a drain has begun."}),
		epoch: prometheus.NewGauge(prometheus.GaugeOpts{Name: "envoy_agent_envoy_epoch",
			Help: "The hot-restart epoch of the serving Envoy."}),
		startSeconds: prometheus.NewGauge(prometheus.GaugeOpts{Name: "envoy_agent_start_seconds",
			Help: "Seconds from starting Envoy to its admin API answering LIVE."}),
		drainSeconds: prometheus.NewGauge(prometheus.GaugeOpts{Name: "envoy_agent_drain_seconds",
			Help: "Seconds the current or last drain has run."}),
		reloads: prometheus.NewCounter(prometheus.CounterOpts{Name: "envoy_agent_reloads_total",
			Help: "Reloads that put a new Envoy epoch in service."}),
		reloadFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "envoy_agent_reload_failures_total",
			Help: "Reloads refused or failed; the serving epoch kept serving."}),
		reloadSeconds: prometheus.NewGauge(prometheus.GaugeOpts{Name: "envoy_agent_last_reload_seconds",
			Help: "How long the last reload took, from the request to READY=1."}),
	}
	m.reg.MustRegister(m.live, m.draining, m.epoch, m.startSeconds, m.drainSeconds, m.reloads, m.reloadFailures, m.reloadSeconds,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
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
		format := expfmt.NewFormat(expfmt.TypeTextPlain)
		w.Header().Set("Content-Type", string(format))
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
		families, err := m.reg.Gather()
		if err != nil {
			log.Warnf("metrics: gather: %v", err)
		}
		enc := expfmt.NewEncoder(w, format)
		for _, mf := range families {
			if err := enc.Encode(mf); err != nil {
				log.Debugf("metrics: encode: %v", err)
				return
			}
		}
	})
}
