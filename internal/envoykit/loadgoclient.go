package envoykit

import (
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// startGoClient runs the GoClient kind: vegeta's attacker at a fixed rate,
// with a client whose silent retries count as failures (ErrRetried).
func (l *Load) startGoClient(o LoadOptions) {
	conns := max(o.Connections, 1)
	tr := &http.Transport{
		Proxy:               nil,
		MaxIdleConnsPerHost: conns,
		MaxConnsPerHost:     conns,
		DisableCompression:  true,
		DialContext:         (&net.Dialer{Timeout: o.Timeout}).DialContext,
	}
	client := &http.Client{Transport: &noRetry{base: tr, retried: &l.retried}, Timeout: o.Timeout}
	attacker := vegeta.NewAttacker(vegeta.Workers(uint64(conns)), vegeta.MaxWorkers(uint64(conns)),
		vegeta.MaxBody(1<<20), vegeta.Client(client))
	target := vegeta.NewStaticTargeter(vegeta.Target{Method: http.MethodGet, URL: o.URL})
	rate := vegeta.ConstantPacer{Freq: int(o.Rate), Per: time.Second}
	l.stop = func() { attacker.Stop() }
	results := attacker.Attack(target, rate, o.Duration, "load")
	go func() {
		var out []Sample
		for r := range results {
			out = append(out, l.goSample(r))
		}
		tr.CloseIdleConnections()
		l.finish(out)
	}()
}

// goSample records one of vegeta's results.
func (l *Load) goSample(r *vegeta.Result) Sample {
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
	l.record(s, why)
	return s
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
