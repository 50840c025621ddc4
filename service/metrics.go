//go:build linux

package service

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	vmetrics "github.com/VictoriaMetrics/metrics"
	"github.com/sirupsen/logrus"

	"github.com/envoy-agent/envoy-agent/envoy"
	"github.com/envoy-agent/envoy-agent/envoy/certs"
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
//   - envoy_agent_reloads_in_place_total{outcome="ok"|"failed"} (counter): reloads (with
//     reload_method "auto") that changed listeners and clusters in the serving Envoy, or tried to
//     (Envoy rejected a resource; the previous ones were put back).
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

	reloadsInPlace       *vmetrics.Counter
	reloadsInPlaceFailed *vmetrics.Counter

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
// metrics, in the Prometheus text format. Envoy's part comes from one
// shared read (scrapeCache): scrapers that arrive together, or within
// metricsCacheTTL, cost Envoy's admin one render, not one each. Sixteen
// clients scraping a 1,500-cluster Envoy (20 MB a scrape) kept its main
// thread rendering, and /healthz/ready's question to it waited 2 s and
// failed.
func (m *metrics) mergedHandler(admin *envoy.AdminClient, log *logrus.Logger) http.Handler {
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
		m.writeTo(&buf)
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
func fetchEnvoyMetrics(ctx context.Context, admin *envoy.AdminClient, buf []byte) ([]byte, error) {
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

// scrapeBody is one read of Envoy's metrics and the scrapes writing it.
type scrapeBody struct {
	data  []byte
	users int // under scrapeCache.mu
}

// maxOldScrapes bounds the reads of Envoy's metrics that are no longer the
// current one but are still being written to a scraper. While that many
// are, the current read serves scrapes past metricsCacheTTL (a scraper
// that does not read holds its read for metricsWriteTimeout at most), so
// the agent holds at most maxOldScrapes+1 copies (and spares it reads
// into), whatever scrapers do: 16 clients that never read would otherwise
// hold 16 copies of 20 MB.
const maxOldScrapes = 1

// scrapeCache shares one read of Envoy's metrics: a scrape that finds one
// under way waits for it, and its answer serves every scrape for
// metricsCacheTTL (longer when maxOldScrapes older reads are still being
// written). A read goes into the memory of an older one that nobody writes
// any more, so that steady scraping makes little garbage; once no scrape
// has come for scrapeIdleDrop, the cache lets it go (expire). The read has
// a context of its own (metricsScrapeTimeout), so a scraper that hangs up
// does not fail it for the others.
type scrapeCache struct {
	fetch func(ctx context.Context, buf []byte) ([]byte, error)

	mu      sync.Mutex
	cur     *scrapeBody
	err     error // of the last read, when it failed (cur is then nil)
	at      time.Time
	old     int           // bodies replaced but still being written
	spares  [][]byte      // the memory of bodies nobody writes any more
	lastLen int           // the size of the last read
	flight  chan struct{} // closed when the read under way ends; nil when none
}

// get returns the body to write, which the caller hands back with release.
func (c *scrapeCache) get(ctx context.Context) (*scrapeBody, error) {
	c.mu.Lock()
	stale := c.at.IsZero() || time.Since(c.at) >= metricsCacheTTL
	if stale && c.flight == nil && (c.old < maxOldScrapes || c.cur == nil) {
		c.flight = make(chan struct{})
		var buf []byte
		if n := len(c.spares); n > 0 {
			buf, c.spares = c.spares[n-1], c.spares[:n-1]
		} else if c.lastLen > 0 {
			// Room for a read the size of the last one: no doubling.
			buf = make([]byte, 0, c.lastLen+c.lastLen/16)
		}
		go c.refresh(c.flight, buf)
	}
	if flight := c.flight; flight != nil && (c.cur == nil || stale && c.old < maxOldScrapes) {
		c.mu.Unlock()
		select {
		case <-flight:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		c.mu.Lock()
	}
	defer c.mu.Unlock()
	if c.cur == nil {
		if c.err == nil {
			return nil, ctx.Err()
		}
		return nil, c.err
	}
	c.cur.users++
	return c.cur, nil
}

// release hands back a body from get once it is written.
func (c *scrapeCache) release(b *scrapeBody) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b.users--
	if b.users == 0 && b != c.cur {
		c.old--
		c.keepSpare(b.data)
	}
}

// maxSpares bounds the memory kept for the next reads: reads, the current
// body and one older one take turns in three.
const maxSpares = 2

// keepSpare keeps data's memory for a next read.
func (c *scrapeCache) keepSpare(data []byte) {
	if len(c.spares) < maxSpares {
		c.spares = append(c.spares, data[:0])
	}
}

// scrapeIdleDrop is how long after its read the current body and the
// spares are let go when no scrape has replaced it and nobody writes it: an
// agent scraped every 15 s holds no copy of Envoy's metrics between
// scrapes, and one scraped back to back keeps reusing its memory.
const scrapeIdleDrop = 5 * metricsCacheTTL

// expire lets b and the spares go scrapeIdleDrop after b's read, unless b
// has been replaced or is being written.
func (c *scrapeCache) expire(b *scrapeBody) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur != b || b.users > 0 {
		return
	}
	c.cur, c.spares = nil, nil
	if c.lastLen >= scrapeFreeOver {
		// The garbage collector would run only at the next allocations,
		// and give the memory back later still: an idle agent that held
		// a large Envoy's metrics would keep their size in its RSS.
		go debug.FreeOSMemory()
	}
}

// scrapeFreeOver is the size of Envoy's metrics past which the agent gives
// their memory back to the system when it lets them go.
const scrapeFreeOver = 4 << 20

func (c *scrapeCache) refresh(flight chan struct{}, buf []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), metricsScrapeTimeout)
	defer cancel()
	data, err := c.fetch(ctx, buf)
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev := c.cur; prev != nil {
		if prev.users > 0 {
			c.old++
		} else {
			c.keepSpare(prev.data)
		}
	}
	c.cur, c.err = nil, err
	if err == nil {
		b := &scrapeBody{data: data}
		c.cur = b
		c.lastLen = len(data)
		time.AfterFunc(scrapeIdleDrop, func() { c.expire(b) })
	}
	c.at, c.flight = time.Now(), nil
	close(flight)
}
