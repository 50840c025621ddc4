package testenvoy

import (
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Load sends keep-alive GETs from a few workers, a few milliseconds apart,
// and counts the outcomes and the x-config-version answers seen.
type Load struct {
	ok, failed atomic.Int64
	stop       chan struct{}
	wg         sync.WaitGroup

	mu       sync.Mutex
	versions map[string]int
	lastErr  string
	last     string // the x-config-version of the latest answer
}

// StartLoad starts workers against url; each stops after 100000 requests
// or when Stop is called.
func StartLoad(url string, workers int) *Load {
	l := &Load{versions: map[string]int{}, stop: make(chan struct{})}
	for range workers {
		l.wg.Add(1)
		go l.worker(url)
	}
	return l
}

func (l *Load) worker(url string) {
	defer l.wg.Done()
	client := &http.Client{Timeout: 10 * time.Second}
	for range 100000 {
		select {
		case <-l.stop:
			return
		default:
		}
		resp, err := client.Get(url)
		if err != nil {
			l.fail(err.Error())
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			l.fail(resp.Status)
			continue
		}
		l.ok.Add(1)
		v := resp.Header.Get("x-config-version")
		l.mu.Lock()
		l.versions[v]++
		l.last = v
		l.mu.Unlock()
		time.Sleep(2 * time.Millisecond)
	}
}

func (l *Load) fail(why string) {
	l.failed.Add(1)
	l.mu.Lock()
	l.lastErr = why
	l.mu.Unlock()
}

// Stop ends the workers and waits for them.
func (l *Load) Stop() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// OK and Failed count the requests so far.
func (l *Load) OK() int64     { return l.ok.Load() }
func (l *Load) Failed() int64 { return l.failed.Load() }

// LastErr is the latest failure's reason.
func (l *Load) LastErr() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastErr
}

// Versions counts answers per x-config-version.
func (l *Load) Versions() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]int, len(l.versions))
	for k, v := range l.versions {
		out[k] = v
	}
	return out
}

// Latest is the x-config-version of the latest answer.
func (l *Load) Latest() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}
