//go:build linux

package httpserver

import (
	"context"
	"runtime/debug"
	"sync"
	"time"
)

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
