//go:build linux

package httpserver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/sirupsen/logrus"
)

// metricsContentType is the Prometheus text exposition format, version 0.0.4.
const metricsContentType = "text/plain; version=0.0.4; charset=utf-8"

const (
	// metricsScrapeTimeout bounds the read of Envoy's /stats/prometheus for
	// one scrape: a large Envoy renders tens of megabytes, and Prometheus's
	// own default scrape timeout is 10 s.
	metricsScrapeTimeout = 10 * time.Second

	// metricsCacheTTL is how long one read of Envoy's metrics serves every
	// scrape: Prometheus scrapes every 15 s or more, and a render of a
	// large Envoy costs its main thread, which also answers /ready.
	metricsCacheTTL = time.Second
)

// Admin is what the metrics port asks of Envoy's admin API:
// *adminapi.Client is one.
type Admin interface {
	// Get sends GET path to Envoy's admin API; the caller closes the
	// answer's body.
	Get(ctx context.Context, path string) (*http.Response, error)
}

// Metrics is the agent's Prometheus port: Envoy's metrics and the agent's
// own, in one scrape (Handler).
type Metrics struct {
	// Log gets why a scrape went without Envoy's part (at debug level)
	// and why the server stopped early (Serve).
	Log *logrus.Logger
	// Admin is the serving Envoy's admin API.
	Admin Admin
	// Agent writes the agent's own metrics in the Prometheus text format,
	// after Envoy's.
	Agent func(io.Writer)
}

// Serve serves m's Handler on ln, a listener already bound, within the
// metrics port's limits, until ctx ends.
func (m *Metrics) Serve(ctx context.Context, ln net.Listener) {
	Serve(ctx, ln, m.Handler(), Limits{MaxConns: metricsMaxConns, Write: metricsWriteTimeout, Evict: true}, m.Log)
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

// Handler serves Envoy's /stats/prometheus followed by the agent's own
// metrics (m.Agent), in the Prometheus text format. Envoy's part comes from
// one shared read (scrapeCache): scrapers that arrive together, or within
// metricsCacheTTL, cost Envoy's admin one render, not one each. Sixteen
// clients scraping a 1,500-cluster Envoy (20 MB a scrape) kept its main
// thread rendering, and /healthz/ready's question to it waited 2 s and
// failed. Each Handler has a cache of its own.
func (m *Metrics) Handler() http.Handler {
	admin, log := m.Admin, m.Log
	cache := &scrapeCache{fetch: func(ctx context.Context, buf []byte) ([]byte, error) { return fetchEnvoyMetrics(ctx, admin, buf) }}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", metricsContentType)
		ctx, cancel := context.WithTimeout(r.Context(), envoyStatsBudget(r.Header))
		defer cancel()
		body, err := cache.get(ctx)
		if err != nil {
			log.Debugf("metrics: %v", err)
		} else {
			_, err := w.Write(body.data)
			cache.release(body)
			if err != nil {
				log.Debugf("metrics: write: %v", err)
				return
			}
		}
		// In one write: WriteProcessMetrics writes line by line.
		var buf bytes.Buffer
		m.Agent(&buf)
		if _, err := w.Write(buf.Bytes()); err != nil {
			log.Debugf("metrics: write: %v", err)
		}
	})
}

// maxEnvoyMetrics bounds what is read of Envoy's /stats/prometheus (a
// 1,500-cluster Envoy renders 20 MB).
const maxEnvoyMetrics = 128 << 20

// fetchEnvoyMetrics reads Envoy's /stats/prometheus whole, into buf's
// memory when it has room.
func fetchEnvoyMetrics(ctx context.Context, admin Admin, buf []byte) ([]byte, error) {
	resp, err := admin.Get(ctx, "/stats/prometheus")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("envoy admin GET /stats/prometheus: status %d", resp.StatusCode)
	}
	b := bytes.NewBuffer(buf[:0])
	if _, err := b.ReadFrom(io.LimitReader(resp.Body, maxEnvoyMetrics+1)); err != nil {
		return nil, fmt.Errorf("envoy admin GET /stats/prometheus: %w", err)
	}
	if b.Len() > maxEnvoyMetrics {
		return nil, fmt.Errorf("envoy admin GET /stats/prometheus: more than %d bytes", maxEnvoyMetrics)
	}
	data := b.Bytes()
	if cap(data) > len(data)+len(data)/8 {
		// The buffer grew by doubling: keep a copy that fits (with room
		// for Envoy's output to grow a little), the doubled one is garbage
		// once, and every later read fits in the copy.
		data = append(make([]byte, 0, len(data)+len(data)/16), data...)
	}
	return data, nil
}
