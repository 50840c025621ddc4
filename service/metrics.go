//go:build linux

package service

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
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
// metrics, in the Prometheus text format. Envoy's part comes from one
// shared scrape (scrapeCache): scrapers that arrive together, or within
// metricsCacheTTL, cost Envoy's admin one render, not one each. Sixteen
// clients scraping a 1,500-cluster Envoy (19 MB a scrape) kept its main
// thread rendering, and /healthz/ready's question to it waited 1.93 s.
func (m *metrics) mergedHandler(admin *envoy.AdminClient, log *logrus.Logger) http.Handler {
	cache := &scrapeCache{fetch: func(ctx context.Context) ([]byte, error) { return fetchEnvoyMetrics(ctx, admin) }}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", metricsContentType)
		body, err := cache.get(r.Context())
		if err != nil {
			log.Debugf("metrics: %v", err)
		} else if _, err := w.Write(body); err != nil {
			log.Debugf("metrics: write: %v", err)
			return
		}
		// In one write: WriteProcessMetrics writes line by line.
		var buf bytes.Buffer
		m.writeTo(&buf)
		if _, err := w.Write(buf.Bytes()); err != nil {
			log.Debugf("metrics: write: %v", err)
		}
	})
}

// maxEnvoyMetrics bounds what is read of Envoy's /stats/prometheus (a
// 1,500-cluster Envoy renders 19 MB).
const maxEnvoyMetrics = 128 << 20

// fetchEnvoyMetrics reads Envoy's /stats/prometheus whole.
func fetchEnvoyMetrics(ctx context.Context, admin *envoy.AdminClient) ([]byte, error) {
	resp, err := admin.Get(ctx, "/stats/prometheus")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("envoy admin GET /stats/prometheus: status %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxEnvoyMetrics+1))
	if err != nil {
		return nil, fmt.Errorf("envoy admin GET /stats/prometheus: %w", err)
	}
	if len(body) > maxEnvoyMetrics {
		return nil, fmt.Errorf("envoy admin GET /stats/prometheus: more than %d bytes", maxEnvoyMetrics)
	}
	return body, nil
}

// scrapeCache shares one read of Envoy's metrics: a scrape that finds one
// under way waits for it, and its answer serves every scrape for
// metricsCacheTTL. The read has a context of its own (metricsScrapeTimeout),
// so a scraper that hangs up does not fail it for the others.
type scrapeCache struct {
	fetch func(context.Context) ([]byte, error)

	mu     sync.Mutex
	at     time.Time
	body   []byte
	err    error
	flight chan struct{} // closed when the read under way ends; nil when none
}

func (c *scrapeCache) get(ctx context.Context) ([]byte, error) {
	c.mu.Lock()
	if !c.at.IsZero() && time.Since(c.at) < metricsCacheTTL {
		defer c.mu.Unlock()
		return c.body, c.err
	}
	flight := c.flight
	if flight == nil {
		flight = make(chan struct{})
		c.flight = flight
		go c.refresh(flight)
	}
	c.mu.Unlock()
	select {
	case <-flight:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.body, c.err
}

func (c *scrapeCache) refresh(flight chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), metricsScrapeTimeout)
	defer cancel()
	body, err := c.fetch(ctx)
	c.mu.Lock()
	c.body, c.err, c.at, c.flight = body, err, time.Now(), nil
	c.mu.Unlock()
	close(flight)
}
