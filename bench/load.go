package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// loadSpec is a fixed-rate, keep-alive HTTP load: workers each send one
// request at a time on their own connection, on a fixed schedule.
type loadSpec struct {
	url     string
	workers int
	rate    float64       // requests per second, all workers together
	max     time.Duration // the load never runs longer than this
	timeout time.Duration // per request
}

// sample is one request of a load.
type sample struct {
	at      time.Duration // when it was sent, since the load began
	lat     time.Duration // until the whole answer was read, or the failure
	ok      bool          // 200 and a complete body
	version string        // x-config-version of the answer
	err     string        // why it failed: refused, reset, eof, timeout, http_503, ...
}

// load is a running loadSpec.
type load struct {
	start  time.Time
	cancel context.CancelFunc
	wg     sync.WaitGroup
	tr     *http.Transport

	mu      sync.Mutex
	samples []sample
}

// startLoad starts the workers. The load ends at stop, when ctx ends, or
// after spec.max; each worker sends at most rate/workers*max+1 requests.
func startLoad(ctx context.Context, spec loadSpec) *load {
	ctx, cancel := context.WithTimeout(ctx, spec.max)
	l := &load{
		start:  time.Now(),
		cancel: cancel,
		tr: &http.Transport{
			Proxy:               nil,
			MaxIdleConnsPerHost: spec.workers,
			DisableCompression:  true,
			DialContext:         (&net.Dialer{Timeout: spec.timeout}).DialContext,
		},
	}
	interval := time.Duration(float64(time.Second) * float64(spec.workers) / spec.rate)
	maxCount := int(spec.max/interval) + 1
	for w := range spec.workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.worker(ctx, spec, interval, time.Duration(w)*interval/time.Duration(spec.workers), maxCount)
		}()
	}
	return l
}

func (l *load) worker(ctx context.Context, spec loadSpec, interval, offset time.Duration, maxCount int) {
	client := &http.Client{Transport: l.tr, Timeout: spec.timeout}
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	var mine []sample
	defer func() {
		l.mu.Lock()
		l.samples = append(l.samples, mine...)
		l.mu.Unlock()
	}()
	for slot, sent := 0, 0; sent < maxCount; slot++ {
		due := l.start.Add(offset + time.Duration(slot)*interval)
		if late := time.Since(due); late > interval {
			// The previous request overran its slot: skip the missed
			// slots rather than send a burst to catch up.
			slot += int(late / interval)
			continue
		}
		timer.Reset(time.Until(due))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		mine = append(mine, l.one(client, spec.url))
		sent++
	}
}

// one sends one GET. It does not use the load's context: stopping the load
// lets requests in flight finish (each is bounded by the client timeout).
func (l *load) one(c *http.Client, u string) sample {
	s := sample{at: time.Since(l.start)}
	t := time.Now()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		s.err = "request"
		return s
	}
	resp, err := c.Do(req)
	if err != nil {
		s.lat, s.err = time.Since(t), errClass(err)
		return s
	}
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	s.lat = time.Since(t)
	s.version = resp.Header.Get("x-config-version")
	switch {
	case err != nil:
		s.err = errClass(err)
	case resp.StatusCode != http.StatusOK:
		s.err = "http_" + strconv.Itoa(resp.StatusCode)
	default:
		s.ok = true
	}
	return s
}

// stop ends the load, waits for requests in flight, closes the idle
// connections and returns every sample in the order they were sent.
func (l *load) stop() []sample {
	l.cancel()
	l.wg.Wait()
	l.tr.CloseIdleConnections()
	l.mu.Lock()
	defer l.mu.Unlock()
	sort.Slice(l.samples, func(i, j int) bool { return l.samples[i].at < l.samples[j].at })
	return l.samples
}

// errClass names a request failure briefly.
func errClass(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	case errors.Is(err, syscall.EPIPE):
		return "broken_pipe"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "eof"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	default:
		return "other"
	}
}
