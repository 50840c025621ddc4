//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Flood sizes of the probe, and the bound a probe must answer
// within: the target is under a second; the check is a bound that fails
// clearly (before the fix, probes took 9 to 35 s).
const (
	floodSlowloris  = 200
	floodIdle       = 10000
	floodProbeBound = 5 * time.Second
	floodProbes     = 5
)

// localFlood is a local user's flood of one TCP port: slowloris clients
// that send a request a byte a second and reconnect when cut, and idle
// connections that send nothing.
type localFlood struct {
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	connects atomic.Int64 // slowloris connections made
	mu       sync.Mutex
	idle     []net.Conn
}

func startFlood(t *testing.T, addr string, slow, idle int) *localFlood {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &localFlood{cancel: cancel}
	t.Cleanup(f.stop)
	const request = "GET /healthz/ready HTTP/1.1\r\nHost: x\r\nX-Slow: " // never ends
	for range slow {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for ctx.Err() == nil {
				c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
				if err != nil {
					continue
				}
				f.connects.Add(1)
				for i := 0; ctx.Err() == nil; i++ {
					if _, err := c.Write([]byte{request[i%len(request)]}); err != nil {
						break
					}
					select {
					case <-ctx.Done():
					case <-tick.C:
					}
				}
				c.Close()
			}
		}()
	}
	for i := range idle {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("idle connection %d: %v", i, err)
		}
		f.mu.Lock()
		f.idle = append(f.idle, c)
		f.mu.Unlock()
	}
	return f
}

func (f *localFlood) stop() {
	f.cancel()
	f.wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.idle {
		c.Close()
	}
	f.idle = nil
}

// probe asks path on a fresh connection, once (no retry), and returns the
// status code and how long the answer took.
func probe(addr, path string, within time.Duration) (int, time.Duration, error) {
	start := time.Now()
	c, err := net.DialTimeout("tcp", addr, within)
	if err != nil {
		return 0, time.Since(start), err
	}
	defer c.Close()
	_ = c.SetDeadline(start.Add(within))
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path); err != nil {
		return 0, time.Since(start), err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, time.Since(start), err
	}
	resp.Body.Close()
	return resp.StatusCode, time.Since(start), nil
}

// TestProbesAnswerUnderALocalFlood: while 200 slowloris clients (a byte a
// second, reconnecting) and 10,000 idle connections flood the status port
// or the metrics port, a new probe of /healthz/ready or a scrape still
// answers 200 (measured under a second; checked against 5 s). Before, the
// 64 status slots (16 for metrics) went to whoever came first: probes took
// 13, 9, 2, 0 and 10 s under slowloris, and 35.7 s after 10,000
// connections.
func TestProbesAnswerUnderALocalFlood(t *testing.T) {
	p := startAgent(t, procOptions{})
	tests := []struct {
		name, path string
		port       int
	}{
		{"status", "/healthz/ready", p.ports.Status},
		{"metrics", "/stats/prometheus", p.ports.Prometheus},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := "127.0.0.1:" + strconv.Itoa(tt.port)
			f := startFlood(t, addr, floodSlowloris, floodIdle)
			var took []time.Duration
			for i := range floodProbes {
				code, d, err := probe(addr, tt.path, floodProbeBound)
				if err != nil || code != 200 {
					t.Fatalf("probe %d of %s under the flood: %d, %v after %s", i, tt.path, code, err, d)
				}
				took = append(took, d)
			}
			// The flood held: every idle connection was made and the
			// slowloris clients kept connecting.
			f.mu.Lock()
			idle := len(f.idle)
			f.mu.Unlock()
			if idle != floodIdle || f.connects.Load() < floodSlowloris {
				t.Fatalf("the flood did not hold: %d idle connections, %d slowloris connects", idle, f.connects.Load())
			}
			t.Logf("%s under %d slowloris and %d idle connections (%d slowloris connects): probes took %v",
				tt.path, floodSlowloris, floodIdle, f.connects.Load(), took)
		})
	}
	if code := p.healthz(); code != 200 {
		t.Fatalf("/healthz/ready = %d after the floods", code)
	}
}
