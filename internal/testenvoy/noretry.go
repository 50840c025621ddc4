package testenvoy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A load that never retries, to count what every client can see.
//
// Go's http.Transport retries an idempotent request once, on a new
// connection, when a kept-alive connection turns out to be closed by the
// server (and checks an idle connection for a pending EOF before it reuses
// it); many clients do neither. Python's http.client, for one, writes the
// next request on a kept-alive connection whatever happened to it and
// reports the error. RawClient behaves like Python's: one net.Conn per
// worker, HTTP/1.1 written by hand, the answer read with
// http.ReadResponse, no retry, a new connection only after an error or a
// "Connection: close". H2Client uses Go's HTTP/2 (h2c) transport, which
// does retry a request that the server's GOAWAY says it never processed
// (that retry is safe by the protocol); it counts those retries.

// Outcome counts what a non-retrying worker saw.
type Outcome struct {
	OK, Failed int64
	// FailedIdle are failures of the first request on a kept-alive
	// connection that had been idle (the server closed it meanwhile).
	FailedIdle int64
	// FailedInFlight are failures of a request on a connection that had
	// just answered (busy) or of a new connection.
	FailedInFlight int64
	Retries        int64 // requests the client sent again (HTTP/2: after a GOAWAY)
	Errors         []string
}

func (o Outcome) String() string {
	return fmt.Sprintf("%d ok, %d failed (%d on idle kept-alive connections, %d others), %d retried", o.OK, o.Failed, o.FailedIdle, o.FailedInFlight, o.Retries)
}

type tally struct {
	ok, failedIdle, failedOther, retries atomic.Int64
	mu                                   sync.Mutex
	errs                                 []string
}

func (t *tally) fail(idle bool, err error) {
	if idle {
		t.failedIdle.Add(1)
	} else {
		t.failedOther.Add(1)
	}
	t.mu.Lock()
	if len(t.errs) < 20 {
		t.errs = append(t.errs, err.Error())
	}
	t.mu.Unlock()
}

func (t *tally) outcome() Outcome {
	t.mu.Lock()
	defer t.mu.Unlock()
	fi, fo := t.failedIdle.Load(), t.failedOther.Load()
	return Outcome{OK: t.ok.Load(), Failed: fi + fo, FailedIdle: fi, FailedInFlight: fo, Retries: t.retries.Load(),
		Errors: append([]string(nil), t.errs...)}
}

// LoadSpec is one kind of worker: which path it asks for and how long it
// keeps its connection idle between requests.
type LoadSpec struct {
	Path    string        // "/" or "/slow?d=8s"
	Idle    time.Duration // pause between requests on the kept-alive connection
	Workers int
}

// NoRetryLoad runs non-retrying workers until Stop.
type NoRetryLoad struct {
	t      tally
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// StartRawLoad starts HTTP/1.1 keep-alive workers on raw connections to
// addr (host:port), as Python's http.client would run them.
func StartRawLoad(addr string, specs ...LoadSpec) *NoRetryLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &NoRetryLoad{cancel: cancel}
	for _, s := range specs {
		for range s.Workers {
			l.wg.Add(1)
			go func() { defer l.wg.Done(); l.rawWorker(ctx, addr, s) }()
		}
	}
	return l
}

// rawRequestTimeout bounds one request of a raw worker: longer than the
// slowest request the tests ask for (envoykit.MaxSlow).
const rawRequestTimeout = 40 * time.Second

func (l *NoRetryLoad) rawWorker(ctx context.Context, addr string, s LoadSpec) {
	var conn net.Conn
	var br *bufio.Reader
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	reused := false
	for ctx.Err() == nil {
		if conn == nil {
			c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", addr)
			if err != nil {
				if ctx.Err() == nil {
					l.t.fail(false, fmt.Errorf("dial: %w", err))
				}
				pause(ctx, 10*time.Millisecond)
				continue
			}
			conn, br, reused = c, bufio.NewReader(c), false
		}
		idle := reused && s.Idle > 0
		_ = conn.SetDeadline(time.Now().Add(rawRequestTimeout))
		resp, err := rawGet(conn, br, s.Path)
		if err != nil {
			if ctx.Err() == nil {
				l.t.fail(idle, err)
			}
			conn.Close()
			conn = nil
			continue
		}
		if resp.StatusCode == http.StatusOK {
			l.t.ok.Add(1)
		} else {
			l.t.fail(idle, fmt.Errorf("status %s", resp.Status))
		}
		if resp.Close {
			conn.Close()
			conn = nil
		}
		reused = true
		pause(ctx, max(s.Idle, 2*time.Millisecond))
	}
}

// rawGet writes one GET and reads its whole answer.
func rawGet(conn net.Conn, br *bufio.Reader, path string) (*http.Response, error) {
	if _, err := io.WriteString(conn, "GET "+path+" HTTP/1.1\r\nHost: test\r\nUser-Agent: noretry\r\n\r\n"); err != nil {
		return nil, fmt.Errorf("write request: %w", err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, fmt.Errorf("read answer: %w", err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	return resp, nil
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// NewH2Client returns an HTTP/2 client over clear text (h2c, prior
// knowledge), which Envoy's HTTP connection manager accepts on a plain
// listener (codec_type AUTO).
func NewH2Client() *http.Client {
	tr := &http.Transport{Proxy: nil, Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: tr, Timeout: rawRequestTimeout}
}

// StartH2Load starts workers sharing one HTTP/2 client (so they share its
// connection, as an HTTP/2 client does), counting the requests the
// transport sent more than once.
func StartH2Load(url string, specs ...LoadSpec) *NoRetryLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &NoRetryLoad{cancel: cancel}
	client := NewH2Client()
	for _, s := range specs {
		for range s.Workers {
			l.wg.Add(1)
			go func() { defer l.wg.Done(); l.h2Worker(ctx, client, url, s) }()
		}
	}
	return l
}

func (l *NoRetryLoad) h2Worker(ctx context.Context, client *http.Client, url string, s LoadSpec) {
	base := strings.TrimSuffix(url, "/")
	for ctx.Err() == nil {
		conns := 0
		reused := false
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
			conns++
			reused = i.Reused && i.WasIdle
		}}
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.WithoutCancel(ctx), trace), http.MethodGet, base+s.Path, nil)
		if err != nil {
			l.t.fail(false, err)
			return
		}
		resp, err := client.Do(req)
		if conns > 1 {
			l.t.retries.Add(int64(conns - 1))
		}
		idle := reused && s.Idle > 0
		switch {
		case err != nil:
			if ctx.Err() == nil {
				l.t.fail(idle, err)
			}
		default:
			_, rerr := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			switch {
			case rerr != nil && !errors.Is(rerr, context.Canceled):
				l.t.fail(idle, fmt.Errorf("read body: %w", rerr))
			case resp.StatusCode != http.StatusOK:
				l.t.fail(idle, fmt.Errorf("status %s", resp.Status))
			case resp.ProtoMajor != 2:
				l.t.fail(idle, fmt.Errorf("answered over %s, not HTTP/2", resp.Proto))
			default:
				l.t.ok.Add(1)
			}
		}
		pause(ctx, max(s.Idle, 2*time.Millisecond))
	}
}

// Stop ends the workers (a request in flight is finished first) and
// returns what they saw.
func (l *NoRetryLoad) Stop() Outcome {
	l.cancel()
	l.wg.Wait()
	return l.t.outcome()
}

// Now returns what the workers saw so far.
func (l *NoRetryLoad) Now() Outcome { return l.t.outcome() }
