package envoykit

import (
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// ErrRetried marks a request that Go's HTTP client sent twice: its first
// try failed on a kept-alive connection that the server had closed, and the
// client silently sent it again on a new one. curl, wrk, h2load and
// Python's http.client do not retry, so such a request counts as failed.
var ErrRetried = errors.New("retried: the first try failed on a reused connection")

// ClientKind is the HTTP client a load runs. Every kind records the same
// Samples and counts; none hides a failure behind a silent retry.
type ClientKind int

const (
	// GoClient is Go's HTTP/1.1 client driven by vegeta at a fixed rate
	// (Rate, Connections): a request it would have retried silently on a
	// new connection fails with ErrRetried. It cannot show what a client
	// sees on an idle kept-alive connection, since Go's transport checks
	// an idle connection for a pending close before reusing it.
	GoClient ClientKind = iota
	// RawHTTP1 are closed-loop workers (Workers), each on one net.Conn, as
	// Python's http.client runs: the request written by hand, the answer
	// read with http.ReadResponse, no retry, the next request written on
	// the kept-alive connection whatever happened to it while idle, a new
	// connection only after an error or a "Connection: close".
	RawHTTP1
	// H2C are closed-loop workers (Workers) sharing one HTTP/2 client over
	// clear text (h2c, prior knowledge), so they share its connection as
	// an HTTP/2 client does. Go's HTTP/2 transport sends a request again
	// when the server's GOAWAY (or REFUSED_STREAM) says it never processed
	// it, which the protocol makes safe: those retries are counted
	// (Retried), not failed.
	H2C
)

// LoadOptions shape a keep-alive HTTP GET load.
type LoadOptions struct {
	URL    string
	Client ClientKind
	// GoClient: requests per second, all connections together (0: 50 a
	// connection, a request every 20 ms, enough to meet every epoch of
	// reloads 200 ms apart and light on a shared 2-core machine), and
	// kept-alive connections (and concurrent requests).
	Rate        float64
	Connections int
	// RawHTTP1 and H2C: the workers, each with its path and idle pause.
	Workers  []Workers
	Duration time.Duration // the load never runs longer than this (0: until Stop)
	Timeout  time.Duration // per request (0: DefaultLoadTimeout)
}

// Workers are n closed-loop workers of the RawHTTP1 or H2C kind: each asks
// for Path, then pauses Idle (at least minPause) with its connection
// kept alive, and asks again.
type Workers struct {
	N    int
	Path string        // "/" or "/slow?d=8s"; "" for the URL's own
	Idle time.Duration // pause between requests on the kept-alive connection
}

// DefaultLoadTimeout bounds one request when LoadOptions.Timeout is 0:
// longer than the slowest request the tests ask for (MaxSlow).
const DefaultLoadTimeout = MaxSlow + 10*time.Second

// defaultRatePerConn is GoClient's requests per second and connection when
// LoadOptions.Rate is 0.
const defaultRatePerConn = 50

// maxErrs is how many failures a load keeps the text of (Errors).
const maxErrs = 20

// Sample is one request of a load.
type Sample struct {
	At      time.Duration // when it was sent, since the load began
	Latency time.Duration // until the whole answer was read, or the failure
	OK      bool          // 200 and a complete body, on the first try
	Version string        // x-config-version of the answer
	Err     string        // why it failed: refused, reset, eof, timeout, retried, http_503, ...
	// Idle: the request was the first on a kept-alive connection after a
	// worker's Idle pause (RawHTTP1, H2C), when the server may have closed
	// the connection meanwhile.
	Idle bool
}

// Load is a running load: the one load of the tests and the benchmark. It
// gives the samples once it ends, and counts while it runs (OK, Failed,
// Latest) for a test that waits on the answers.
type Load struct {
	client ClientKind
	start  time.Time
	stop   func()
	done   chan []Sample

	ok, failed, failedIdle, retried atomic.Int64

	mu       sync.Mutex
	versions map[string]int // answers per x-config-version
	latest   string         // the x-config-version of the latest answer
	lastErr  string         // the latest failure, as the client saw it
	errs     []string       // the first maxErrs failures, as the client saw them
}

// StartLoad starts the load; it ends at Stop or after o.Duration.
func StartLoad(o LoadOptions) *Load {
	if o.Timeout <= 0 {
		o.Timeout = DefaultLoadTimeout
	}
	l := &Load{client: o.Client, done: make(chan []Sample, 1), versions: map[string]int{}}
	l.start = time.Now()
	switch o.Client {
	case RawHTTP1, H2C:
		l.startWorkers(o)
	default:
		if o.Rate <= 0 {
			o.Rate = float64(defaultRatePerConn * max(o.Connections, 1))
		}
		l.startGoClient(o)
	}
	return l
}

// StartLoadUntilCleanup is StartLoad for a test: the load is stopped when
// the test ends, and its counts logged.
func StartLoadUntilCleanup(t testing.TB, o LoadOptions) *Load {
	l := StartLoad(o)
	t.Cleanup(func() {
		l.Stop()
		t.Logf("load %s", l)
		if errs := l.Errors(); len(errs) > 0 {
			t.Logf("load failures: %s", strings.Join(errs, "; "))
		}
	})
	return l
}

// WaitAnswers waits until the load has had n more good answers than now;
// it fails the test when they do not come within 10s.
func WaitAnswers(t testing.TB, l *Load, n int64) {
	t.Helper()
	from := l.OK()
	if !Eventually(10*time.Second, func() bool { return l.OK() >= from+n }) {
		t.Fatalf("the load got fewer than %d answers in 10s (%s, last error: %s)", n, l, l.LastErr())
	}
}

// record counts one request.
func (l *Load) record(s Sample, why string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s.OK {
		l.ok.Add(1)
		l.versions[s.Version]++
		l.latest = s.Version
		return
	}
	l.failed.Add(1)
	if s.Idle {
		l.failedIdle.Add(1)
	}
	l.lastErr = why
	if len(l.errs) < maxErrs {
		// When it was sent, on the wall clock, to set against the
		// timestamps of the agent's and Envoy's logs.
		l.errs = append(l.errs, fmt.Sprintf("%s (sent at %s, after %s)", why, l.start.Add(s.At).UTC().Format("15:04:05.000"), s.Latency.Round(time.Millisecond)))
	}
}

// finish hands out the samples once the load has ended.
func (l *Load) finish(out []Sample) {
	sort.Slice(out, func(i, j int) bool { return out[i].At < out[j].At })
	l.done <- out
}

// OK is how many requests so far got a 200 and a whole body on the first
// try.
func (l *Load) OK() int64 { return l.ok.Load() }

// Failed is how many requests so far failed, GoClient's retried ones
// included.
func (l *Load) Failed() int64 { return l.failed.Load() }

// FailedIdle is how many of the failures were of the first request on a
// kept-alive connection left idle (Sample.Idle); the others failed in
// flight, on a busy connection or a new one.
func (l *Load) FailedIdle() int64 { return l.failedIdle.Load() }

// FailedInFlight is how many requests failed on a busy or a new
// connection: Failed less FailedIdle.
func (l *Load) FailedInFlight() int64 { return l.Failed() - l.FailedIdle() }

// Retried is how many requests the client sent again: with GoClient each
// is also a failure (ErrRetried); with H2C each is a retry HTTP/2 makes
// safe, not a failure; RawHTTP1 never retries.
func (l *Load) Retried() int64 { return l.retried.Load() }

// LastErr is the latest failure as the client saw it ("" when none).
func (l *Load) LastErr() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastErr
}

// Errors are the first failures (at most 20) as the client saw them.
func (l *Load) Errors() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.errs...)
}

// Latest is the x-config-version of the latest answer.
func (l *Load) Latest() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.latest
}

// Versions counts the answers so far per x-config-version.
func (l *Load) Versions() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.versions)
}

// String sums the load up for a test's log.
func (l *Load) String() string {
	return fmt.Sprintf("%s: %d ok, %d failed (%d on idle kept-alive connections, %d in flight), %d retried",
		l.client, l.OK(), l.Failed(), l.FailedIdle(), l.FailedInFlight(), l.Retried())
}

func (k ClientKind) String() string {
	switch k {
	case RawHTTP1:
		return "raw HTTP/1.1"
	case H2C:
		return "HTTP/2 (h2c)"
	default:
		return "Go HTTP/1.1"
	}
}

// Stop ends the load, lets the requests in flight finish (each bounded by
// the timeout), and returns every sample in the order they were sent.
func (l *Load) Stop() []Sample {
	l.stop()
	return l.Wait()
}

// Wait waits for the load to end by itself (its Duration) and returns the
// samples.
func (l *Load) Wait() []Sample {
	out := <-l.done
	l.done <- out
	return out
}

// Start is when the load began; Sample.At counts from it.
func (l *Load) Start() time.Time { return l.start }

// ErrClass names a request failure briefly, from its text (vegeta keeps
// errors as text).
func ErrClass(msg string) string {
	switch {
	case strings.Contains(msg, ErrRetried.Error()):
		return "retried"
	case strings.Contains(msg, "connection refused"):
		return "refused"
	case strings.Contains(msg, "connection reset"):
		return "reset"
	case strings.Contains(msg, "broken pipe"):
		return "broken_pipe"
	case strings.Contains(msg, "EOF"):
		return "eof"
	case strings.Contains(msg, "Timeout") || strings.Contains(msg, "timeout") || strings.Contains(msg, "deadline exceeded"):
		return "timeout"
	default:
		return "other"
	}
}
