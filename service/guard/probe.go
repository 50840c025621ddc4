package guard

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Probe is one answer of the operator's URL (agent.reload_guard_url).
type Probe struct {
	URL string
	// OK: it answered 2xx.
	OK bool
	// Answer is the status ("200 OK") or why there was none.
	Answer string
}

// ProbeTimeout bounds one ask of the URL: under the second between two
// reads, so that a URL that hangs is one failed read, not a stalled
// guard.
const ProbeTimeout = 800 * time.Millisecond

// maxProbeBody bounds what is read of the URL's answer (and thrown away).
const maxProbeBody = 64 << 10

// NewProbeClient is the client Ask wants: a new connection for every ask
// (a kept one would reach a listener Envoy replaced), no proxy from the
// environment, no redirect followed (a 3xx is not a 2xx), ProbeTimeout.
func NewProbeClient() *http.Client {
	return &http.Client{
		Transport:     &http.Transport{DisableKeepAlives: true, Proxy: nil},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       ProbeTimeout,
	}
}

// Ask GETs url once with client (NewProbeClient).
func Ask(ctx context.Context, client *http.Client, target string) Probe {
	p := Probe{URL: target}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		p.Answer = err.Error()
		return p
	}
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the method and URL, which Probe has
		}
		p.Answer = err.Error()
		return p
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxProbeBody))
	resp.Body.Close()
	p.Answer = cmp.Or(resp.Status, strconv.Itoa(resp.StatusCode))
	p.OK = resp.StatusCode >= 200 && resp.StatusCode <= 299
	return p
}
