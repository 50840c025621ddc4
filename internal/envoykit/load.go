package envoykit

import (
	"errors"
	"maps"
	"net"
	"net/http"
	"net/http/httptrace"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// ErrRetried marks a request that Go's HTTP client sent twice: its first
// try failed on a kept-alive connection that the server had closed, and the
// client silently sent it again on a new one. curl, wrk, h2load and
// Python's http.client do not retry, so such a request counts as failed.
var ErrRetried = errors.New("retried: the first try failed on a reused connection")

// LoadOptions shape a fixed-rate, keep-alive HTTP GET load.
type LoadOptions struct {
	URL         string
	Rate        float64       // requests per second, all connections together
	Connections int           // kept-alive connections (and concurrent requests)
	Duration    time.Duration // the load never runs longer than this
	Timeout     time.Duration // per request
}

// Sample is one request of a load.
type Sample struct {
	At      time.Duration // when it was sent, since the load began
	Latency time.Duration // until the whole answer was read, or the failure
	OK      bool          // 200 and a complete body, on the first try
	Version string        // x-config-version of the answer
	Err     string        // why it failed: refused, reset, eof, timeout, retried, http_503, ...
}

// Load is a running load: vegeta's attacker at a fixed rate, with a client
// whose silent retries count as failures (ErrRetried). It is the one load
// of the tests and the benchmark: the samples once it ends, and counts
// while it runs (OK, Failed, Latest) for a test that waits on the answers.
type Load struct {
	start    time.Time
	attacker *vegeta.Attacker
	results  <-chan *vegeta.Result
	done     chan []Sample
	retried  atomic.Int64

	ok, failed atomic.Int64
	mu         sync.Mutex
	versions   map[string]int // answers per x-config-version
	latest     string         // the x-config-version of the latest answer
	lastErr    string         // the latest failure, as the client saw it
}

// StartLoad starts the load; it ends at Stop or after o.Duration.
func StartLoad(o LoadOptions) *Load {
	conns := max(o.Connections, 1)
	l := &Load{done: make(chan []Sample, 1), versions: map[string]int{}}
	tr := &http.Transport{
		Proxy:               nil,
		MaxIdleConnsPerHost: conns,
		MaxConnsPerHost:     conns,
		DisableCompression:  true,
		DialContext:         (&net.Dialer{Timeout: o.Timeout}).DialContext,
	}
	client := &http.Client{Transport: &noRetry{base: tr, retried: &l.retried}, Timeout: o.Timeout}
	l.attacker = vegeta.NewAttacker(vegeta.Workers(uint64(conns)), vegeta.MaxWorkers(uint64(conns)),
		vegeta.MaxBody(1<<20), vegeta.Client(client))
	target := vegeta.NewStaticTargeter(vegeta.Target{Method: http.MethodGet, URL: o.URL})
	rate := vegeta.ConstantPacer{Freq: int(o.Rate), Per: time.Second}
	l.start = time.Now()
	l.results = l.attacker.Attack(target, rate, o.Duration, "load")
	go func() {
		var out []Sample
		for r := range l.results {
			out = append(out, l.sample(r))
		}
		tr.CloseIdleConnections()
		sort.Slice(out, func(i, j int) bool { return out[i].At < out[j].At })
		l.done <- out
	}()
	return l
}

func (l *Load) sample(r *vegeta.Result) Sample {
	s := Sample{At: r.Timestamp.Sub(l.start), Latency: r.Latency, Version: r.Headers.Get("x-config-version")}
	why := r.Error
	switch {
	case r.Error != "":
		s.Err = ErrClass(r.Error)
	case r.Code != http.StatusOK:
		s.Err = "http_" + strconv.Itoa(int(r.Code))
		why = s.Err
	default:
		s.OK = true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if s.OK {
		l.ok.Add(1)
		l.versions[s.Version]++
		l.latest = s.Version
	} else {
		l.failed.Add(1)
		l.lastErr = why
	}
	return s
}

// OK is how many requests so far got a 200 and a whole body on the first
// try.
func (l *Load) OK() int64 { return l.ok.Load() }

// Failed is how many requests so far failed, retried ones included.
func (l *Load) Failed() int64 { return l.failed.Load() }

// LastErr is the latest failure as the client saw it ("" when none).
func (l *Load) LastErr() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastErr
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

// Stop ends the load, lets the requests in flight finish (each bounded by
// the timeout), and returns every sample in the order they were sent.
func (l *Load) Stop() []Sample {
	l.attacker.Stop()
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

// Retried is how many requests Go's client would have retried silently.
func (l *Load) Retried() int64 { return l.retried.Load() }

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

// noRetry is a RoundTripper that fails a request which net/http's
// Transport sent more than once. The Transport retries an idempotent
// request, once, when a kept-alive connection turns out closed before any
// answer came; it asks for a connection (httptrace's GetConn) per try.
type noRetry struct {
	base    http.RoundTripper
	retried *atomic.Int64
}

func (n *noRetry) RoundTrip(req *http.Request) (*http.Response, error) {
	var tries atomic.Int32
	trace := &httptrace.ClientTrace{GetConn: func(string) { tries.Add(1) }}
	resp, err := n.base.RoundTrip(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
	if tries.Load() > 1 {
		n.retried.Add(1)
		if resp != nil {
			resp.Body.Close()
		}
		return nil, ErrRetried
	}
	return resp, err
}
