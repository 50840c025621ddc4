//go:build linux

package httpserver

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
)

// TestScrapeCacheSharesAndBounds: scrapes that arrive together cost Envoy
// one read; a fresh answer is reused; a scrape that hangs up does not fail
// the read for the others; and scrapers that hold their answers (never
// read) hold at most maxOldScrapes+1 reads: past that, the current one
// serves, stale, and Envoy is not asked again until one is handed back.
func TestScrapeCacheSharesAndBounds(t *testing.T) {
	var reads atomic.Int32
	release := make(chan struct{})
	c := &scrapeCache{fetch: func(_ context.Context, buf []byte) ([]byte, error) {
		n := reads.Add(1)
		if n == 1 {
			<-release
		}
		return append(buf, byte('0'+n)), nil
	}}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.get(gone); err == nil {
		t.Fatal("a scrape that hung up got an answer before the read ended")
	}
	var wg sync.WaitGroup
	bodies := make(chan *scrapeBody, 20)
	for range 20 {
		wg.Go(func() {
			b, err := c.get(context.Background())
			if err != nil {
				t.Errorf("get: %v", err)
				return
			}
			bodies <- b
		})
	}
	close(release)
	wg.Wait()
	close(bodies)
	var first *scrapeBody
	for b := range bodies {
		if string(b.data) != "1" {
			t.Fatalf("a scrape got %q, want the one read's %q", b.data, "1")
		}
		first = b
		c.release(b)
	}
	if n := reads.Load(); n != 1 {
		t.Fatalf("20 scrapes at once (and one that hung up) read Envoy %d times, want 1", n)
	}
	// Fresh: reused.
	held1, _ := c.get(context.Background())
	if reads.Load() != 1 || held1 != first {
		t.Fatalf("a fresh answer was read again (%d reads)", reads.Load())
	}
	stale := func() {
		c.mu.Lock()
		c.at = c.at.Add(-2 * metricsCacheTTL)
		c.mu.Unlock()
	}
	// Stale, held by a scraper that never reads: one more read is allowed.
	stale()
	held2, _ := c.get(context.Background())
	if string(held2.data) != "2" {
		t.Fatalf("a stale answer was not read again: got %q", held2.data)
	}
	// Both held: the current one serves, stale, with no read.
	stale()
	b, _ := c.get(context.Background())
	if b != held2 || reads.Load() != 2 {
		t.Fatalf("with %d old reads held, Envoy was read again (%d reads, got %q)", maxOldScrapes, reads.Load(), b.data)
	}
	c.release(b)
	// The old one handed back: a read again, into its memory.
	c.release(held1)
	b, _ = c.get(context.Background())
	if string(b.data) != "3" {
		t.Fatalf("after the old read was handed back: got %q, want a new read", b.data)
	}
	c.release(b)
	c.release(held2)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.old != 0 || len(c.spares) > maxSpares {
		t.Fatalf("old %d, %d spares after every body was handed back", c.old, len(c.spares))
	}
}
