package envoykit

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The closed-loop kinds of load, RawHTTP1 and H2C: workers that each send
// a request, wait for the whole answer, pause, and send the next, on a
// kept-alive connection. Go's http.Transport retries an idempotent request
// once on a new connection when a kept-alive one turns out closed, and
// checks an idle connection for a pending close before reusing it; many
// clients do neither, and these workers show what they see.

// minPause is the least pause between a worker's requests.
const minPause = 2 * time.Millisecond

// dialTimeout bounds a worker's connect.
const dialTimeout = 5 * time.Second

// startWorkers runs o.Workers until Stop or o.Duration. A request in flight
// at Stop is finished and counted: nothing a worker sees is dropped.
func (l *Load) startWorkers(o LoadOptions) {
	ctx, cancel := context.WithCancel(context.Background())
	if o.Duration > 0 {
		ctx, cancel = context.WithTimeout(context.Background(), o.Duration)
	}
	l.stop = cancel
	var h2 *http.Client
	if o.Client == H2C {
		h2 = NewH2CClient(o.Timeout)
	}
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		out []Sample
	)
	for _, w := range o.Workers {
		target, err := workerURL(o.URL, w.Path)
		for range w.N {
			wg.Go(func() {
				var get func() (Sample, string)
				switch {
				case err != nil:
					get = func() (Sample, string) { return Sample{Err: "other"}, err.Error() }
				case h2 != nil:
					get = func() (Sample, string) { return l.h2Get(h2, target, w.Idle > 0) }
				default:
					rc := &rawConn{addr: target.Host, path: target.RequestURI(), timeout: o.Timeout}
					defer rc.close()
					get = func() (Sample, string) { return rc.get(w.Idle > 0) }
				}
				mine := l.work(ctx, w.Idle, get)
				mu.Lock()
				out = append(out, mine...)
				mu.Unlock()
			})
		}
	}
	go func() {
		wg.Wait()
		if h2 != nil {
			h2.CloseIdleConnections()
		}
		l.finish(out)
	}()
}

// workerURL is base with its path and query replaced by path ("" keeps
// base's).
func workerURL(base, path string) (*url.URL, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("load URL: %w", err)
	}
	if path == "" {
		return u, nil
	}
	ref, err := url.Parse(path)
	if err != nil {
		return nil, fmt.Errorf("load path: %w", err)
	}
	return u.ResolveReference(ref), nil
}

// work is one worker's loop: a request, recorded, then the pause, until
// ctx ends. A failure that cannot send a request (a refused connect)
// pauses too, so a worker does not spin.
func (l *Load) work(ctx context.Context, idle time.Duration, get func() (Sample, string)) []Sample {
	var out []Sample
	for ctx.Err() == nil {
		sent := time.Now()
		s, why := get()
		s.At, s.Latency = sent.Sub(l.start), time.Since(sent)
		l.record(s, why)
		out = append(out, s)
		t := time.NewTimer(max(idle, minPause))
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	return out
}

// rawConn is one RawHTTP1 worker's connection.
type rawConn struct {
	addr, path string
	timeout    time.Duration
	conn       net.Conn
	br         *bufio.Reader
	reused     bool // it has answered a request before
}

// get sends one GET on the kept-alive connection (a new one after an error
// or a "Connection: close") and reads the whole answer; idling says the
// worker paused before it.
func (c *rawConn) get(idling bool) (Sample, string) {
	if c.conn == nil {
		conn, err := net.DialTimeout("tcp", c.addr, dialTimeout)
		if err != nil {
			err = fmt.Errorf("dial: %w", err)
			return Sample{Err: ErrClass(err.Error())}, err.Error()
		}
		c.conn, c.br, c.reused = conn, bufio.NewReader(conn), false
	}
	s := Sample{Idle: c.reused && idling}
	_ = c.conn.SetDeadline(time.Now().Add(c.timeout))
	resp, err := c.roundTrip()
	if err != nil {
		c.close()
		s.Err = ErrClass(err.Error())
		return s, err.Error()
	}
	if resp.Close {
		c.close()
	}
	c.reused = true
	s.Version = resp.Header.Get("x-config-version")
	if resp.StatusCode != http.StatusOK {
		s.Err = "http_" + strconv.Itoa(resp.StatusCode)
		return s, s.Err
	}
	s.OK = true
	return s, ""
}

// roundTrip writes the request by hand and reads the whole answer.
func (c *rawConn) roundTrip() (*http.Response, error) {
	if _, err := io.WriteString(c.conn, "GET "+c.path+" HTTP/1.1\r\nHost: "+c.addr+"\r\nUser-Agent: envoykit-raw\r\n\r\n"); err != nil {
		return nil, fmt.Errorf("write request: %w", err)
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return nil, fmt.Errorf("read answer: %w", err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	return resp, nil
}

func (c *rawConn) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

// NewH2CClient returns an HTTP/2 client over clear text (h2c, prior
// knowledge), which Envoy's HTTP connection manager accepts on a plain
// listener (codec_type AUTO).
func NewH2CClient(timeout time.Duration) *http.Client {
	tr := &http.Transport{Proxy: nil, Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: tr, Timeout: timeout}
}

// h2Get sends one GET with the shared HTTP/2 client and reads the whole
// answer, counting the connections it took beyond the first as retries
// (httptrace's GotConn, once per try); idling says the worker paused
// before it.
func (l *Load) h2Get(client *http.Client, u *url.URL, idling bool) (Sample, string) {
	var conns atomic.Int32
	var reused atomic.Bool
	// Reused, not WasIdle: the workers share one connection, and those
	// that wake from their pause together find it busy with each other's
	// streams, yet it sat idle, kept alive, through the pause all the same.
	// When the server closed it meanwhile, the first stream's write error
	// aborts the others ("force closed via ClientConn.Close"): every one of
	// them failed on the idle connection, not on a fresh or busy one.
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		conns.Add(1)
		reused.Store(i.Reused)
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, u.String(), nil)
	if err != nil {
		return Sample{Err: "other"}, err.Error()
	}
	resp, err := client.Do(req)
	if n := conns.Load(); n > 1 {
		l.retried.Add(int64(n - 1))
	}
	s := Sample{Idle: reused.Load() && idling}
	if err != nil {
		s.Err = ErrClass(err.Error())
		return s, err.Error()
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	s.Version = resp.Header.Get("x-config-version")
	switch {
	case err != nil:
		err = fmt.Errorf("read body: %w", err)
		s.Err = ErrClass(err.Error())
		return s, err.Error()
	case resp.StatusCode != http.StatusOK:
		s.Err = "http_" + strconv.Itoa(resp.StatusCode)
		return s, s.Err
	case resp.ProtoMajor != 2:
		s.Err = "not_http2"
		return s, "answered over " + resp.Proto + ", not HTTP/2"
	}
	s.OK = true
	return s, ""
}
