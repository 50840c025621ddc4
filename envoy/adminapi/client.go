//go:build linux

// Package adminapi is the client of one Envoy's admin API, on TCP or on a
// unix socket: readiness, server info, stats, listeners, and the drain,
// health-check, quit and log-reopening calls. It knows nothing of
// processes or epochs: package envoy owns the client of the Envoy it runs.
package adminapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultTimeout bounds one admin call made without a deadline of its
// own: Envoy's admin answers in milliseconds.
const DefaultTimeout = 5 * time.Second

// idleConnTimeout is how long the kept /ready connection may idle: longer
// than the watchdog's ping period, so that the watchdog probes reuse one
// connection.
const idleConnTimeout = 30 * time.Second

// maxAdminBody bounds what is read of an admin answer.
const maxAdminBody = 64 << 20

// Client talks to one Envoy's admin API over HTTP, on TCP or on a
// unix socket.
type Client struct {
	base   string
	dial   func(ctx context.Context, network, addr string) (net.Conn, error) // nil: TCP to base's host
	client *http.Client                                                      // a fresh connection for every call but /ready

	mu    sync.Mutex
	probe *http.Client // GET /ready, kept alive: the probes repeat it
}

// New returns a client for the admin API at host:port. Only
// GET /ready reuses a connection (the readiness and watchdog probes repeat
// it every few milliseconds or seconds); every other call takes a fresh
// one, so that it reaches whichever Envoy owns the admin port now: after a
// hot restart, a kept connection still talks to the old epoch. Reconnect
// drops the kept one. A frozen Envoy shows as timeouts either way.
func New(host string, port int) *Client {
	return newClient("http://"+net.JoinHostPort(host, strconv.Itoa(port)), nil)
}

// NewUnix returns a client for the admin API on the unix socket
// at path (the bootstrap's admin.address.pipe), with the same connection
// rules as New: a new epoch binds the path afresh, and a fresh
// connection reaches it.
func NewUnix(path string) *Client {
	var d net.Dialer
	return newClient("http://envoy-admin", func(ctx context.Context, _, _ string) (net.Conn, error) {
		return d.DialContext(ctx, "unix", path)
	})
}

func newClient(base string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *Client {
	c := &Client{base: base, dial: dial}
	c.client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil, DialContext: dial}}
	c.probe = c.newProbeClient()
	return c
}

func (c *Client) newProbeClient() *http.Client {
	return &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: c.dial, MaxIdleConns: 1, MaxIdleConnsPerHost: 1,
		IdleConnTimeout: idleConnTimeout}}
}

// Reconnect drops the kept connection, so that the next /ready reaches the
// Envoy that owns the admin port now (after a hot restart).
func (c *Client) Reconnect() {
	c.mu.Lock()
	old := c.probe
	c.probe = c.newProbeClient()
	c.mu.Unlock()
	old.CloseIdleConnections()
}

// Ready is the answer of GET /ready: the server state and whether it is LIVE.
type Ready struct {
	State string // LIVE, DRAINING, PRE_INITIALIZING or INITIALIZING
	Live  bool   // the endpoint answered 200
}

// Ready asks GET /ready. A nil error means the admin API answered, live or not.
func (c *Client) Ready(ctx context.Context) (Ready, error) {
	code, body, err := c.do(ctx, http.MethodGet, "/ready")
	if err != nil {
		return Ready{}, err
	}
	return Ready{State: strings.TrimSpace(string(body)), Live: code == http.StatusOK}, nil
}

// HealthcheckFail makes Envoy fail inbound health checks (POST /healthcheck/fail).
func (c *Client) HealthcheckFail(ctx context.Context) error {
	return c.post(ctx, "/healthcheck/fail")
}

// DrainListeners starts a drain (POST /drain_listeners). graceful keeps the
// listeners accepting for Envoy's drain time while connections are told to
// close; skipExit keeps them open after it.
func (c *Client) DrainListeners(ctx context.Context, inboundOnly, graceful, skipExit bool) error {
	var q []string
	if inboundOnly {
		q = append(q, "inboundonly")
	}
	if graceful {
		q = append(q, "graceful")
	}
	if skipExit {
		q = append(q, "skip_exit")
	}
	path := "/drain_listeners"
	if len(q) > 0 {
		path += "?" + strings.Join(q, "&")
	}
	return c.post(ctx, path)
}

// Quit asks Envoy to exit at once, flushing its logs and stats
// (POST /quitquitquit).
func (c *Client) Quit(ctx context.Context) error {
	return c.post(ctx, "/quitquitquit")
}

// ReopenLogs is POST /reopen_logs: Envoy reopens its access logs (and --log-path).
func (c *Client) ReopenLogs(ctx context.Context) error {
	return c.post(ctx, "/reopen_logs")
}

// activeConnectionsPath asks for the per-listener active connection gauges,
// all of them: with usedonly, a new epoch hides the gauges of listeners it
// has not used itself, although the old epoch's connections are merged into
// them (at its stats flush). Envoy.ActiveConnections counts from the kernel
// instead; this is its fallback.
const activeConnectionsPath = `/stats?filter=^listener\..*downstream_cx_active$`

// ActiveConnections sums the active downstream connections of Envoy's
// listeners, leaving out the admin listener and the per-worker copies.
func (c *Client) ActiveConnections(ctx context.Context) (int, error) {
	code, body, err := c.do(ctx, http.MethodGet, activeConnectionsPath)
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("GET /stats: %s", statusText(code, body))
	}
	return ParseActiveConnections(body)
}

// ParseActiveConnections sums the listener.*.downstream_cx_active gauges in
// the text output of GET /stats, skipping the admin listener, per-worker
// copies and Envoy's internal listeners.
func ParseActiveConnections(body []byte) (int, error) {
	total := 0
	for i, line := range strings.Split(string(body), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		name, value, ok := strings.Cut(line, ": ")
		if !ok {
			return 0, fmt.Errorf("stats line %d: want \"name: value\", got %q", i+1, truncate(line, 80))
		}
		if !strings.HasPrefix(name, "listener.") || !strings.HasSuffix(name, ".downstream_cx_active") ||
			strings.HasPrefix(name, "listener.admin.") || strings.HasPrefix(name, "listener.envoy_internal_") ||
			strings.Contains(name, ".worker_") {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(value), 10, 31)
		if err != nil {
			return 0, fmt.Errorf("stats line %d: %s: value %q is not a connection count", i+1, name, truncate(value, 40))
		}
		total += int(n)
		if total < 0 || total > 1<<31 {
			return 0, fmt.Errorf("stats line %d: connection count overflows", i+1)
		}
	}
	return total, nil
}

// ServerInfo is the part of GET /server_info the agent uses.
type ServerInfo struct {
	Version            string `json:"version"`
	State              string `json:"state"`
	HotRestartVersion  string `json:"hot_restart_version"`
	CommandLineOptions struct {
		BaseID       string `json:"base_id"`
		RestartEpoch int    `json:"restart_epoch"`
		ConfigPath   string `json:"config_path"`
	} `json:"command_line_options"`
}

// ServerInfo asks GET /server_info.
func (c *Client) ServerInfo(ctx context.Context) (ServerInfo, error) {
	code, body, err := c.do(ctx, http.MethodGet, "/server_info")
	if err != nil {
		return ServerInfo{}, err
	}
	if code != http.StatusOK {
		return ServerInfo{}, fmt.Errorf("GET /server_info: %s", statusText(code, body))
	}
	return ParseServerInfo(body)
}

// ParseServerInfo decodes the JSON answer of GET /server_info.
func ParseServerInfo(body []byte) (ServerInfo, error) {
	var si ServerInfo
	if err := json.Unmarshal(body, &si); err != nil {
		return ServerInfo{}, fmt.Errorf("decode /server_info: %w", err)
	}
	return si, nil
}

// Get issues GET path and returns the open response; the caller closes its
// body. It is how the agent relays /stats/prometheus.
func (c *Client) Get(ctx context.Context, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return nil, fmt.Errorf("envoy admin GET %s: %w", path, err)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("envoy admin GET %s: %w", path, err)
	}
	return resp, nil
}

// Read issues GET path and returns the body of a 200 answer; any other
// status is an error that quotes the start of the body.
func (c *Client) Read(ctx context.Context, path string) ([]byte, error) {
	code, body, err := c.do(ctx, http.MethodGet, path)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("envoy admin GET %s: %s", path, statusText(code, body))
	}
	return body, err
}

func (c *Client) post(ctx context.Context, path string) error {
	code, body, err := c.do(ctx, http.MethodPost, path)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("envoy admin POST %s: %s", path, statusText(code, body))
	}
	return nil
}

func (c *Client) do(ctx context.Context, method, path string) (int, []byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("envoy admin %s %s: %w", method, path, err)
	}
	client := c.client
	if method == http.MethodGet && path == "/ready" {
		c.mu.Lock()
		client = c.probe
		c.mu.Unlock()
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("envoy admin %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAdminBody))
	if err != nil {
		return 0, nil, fmt.Errorf("envoy admin %s %s: read answer: %w", method, path, err)
	}
	return resp.StatusCode, body, nil
}

func statusText(code int, body []byte) string {
	return fmt.Sprintf("status %d: %s", code, truncate(strings.TrimSpace(string(body)), 200))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
