package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"
)

// oneShot is an HTTP client with no connection reuse, as the agent's admin
// client is, so that every request pays for its own connection.
func oneShot(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
}

func localURL(port int, path string) string { return "http://127.0.0.1:" + strconv.Itoa(port) + path }

// get does one GET and returns the status and body.
func get(ctx context.Context, c *http.Client, u string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("GET %s: %w", u, err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("GET %s: %w", u, err)
	}
	return resp.StatusCode, body, nil
}

func post(ctx context.Context, c *http.Client, u string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return fmt.Errorf("POST %s: %w", u, err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("POST %s: %w", u, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: status %d", u, resp.StatusCode)
	}
	return nil
}

// pollReady polls Envoy's GET /ready every interval, each on a fresh
// connection, until it answers 200, and returns when it did. It gives up
// after timeout, when p exits, or when ctx ends.
func pollReady(ctx context.Context, p *proc, adminPort int, interval, timeout time.Duration) (time.Time, error) {
	c := oneShot(max(100*time.Millisecond, interval))
	u := localURL(adminPort, "/ready")
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for n := int(timeout/interval) + 1; n > 0; n-- {
		code, _, err := get(ctx, c, u)
		if err == nil && code == http.StatusOK {
			return time.Now(), nil
		}
		if p != nil && p.exitedEarly() {
			return time.Time{}, p.failure(fmt.Errorf("%s exited before /ready answered 200: %v", p.name, p.Err()))
		}
		if time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("waiting for %s: %w", u, ctx.Err())
		case <-tick.C:
		}
	}
	err := fmt.Errorf("%s did not answer 200 within %s", u, timeout)
	if p != nil {
		err = p.failure(err)
	}
	return time.Time{}, err
}

// pollServerInfo polls Envoy's GET /server_info every interval, each on a
// fresh connection, until it says epoch is LIVE, and returns when it did.
// It gives up after timeout, when p exits, or when ctx ends.
func pollServerInfo(ctx context.Context, p *proc, adminPort, epoch int, interval, timeout time.Duration) (time.Time, error) {
	c := oneShot(max(100*time.Millisecond, interval))
	u := localURL(adminPort, "/server_info")
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		code, body, err := get(ctx, c, u)
		if err == nil && code == http.StatusOK {
			var si struct {
				State   string `json:"state"`
				Options struct {
					RestartEpoch int `json:"restart_epoch"`
				} `json:"command_line_options"`
			}
			if json.Unmarshal(body, &si) == nil && si.State == "LIVE" && si.Options.RestartEpoch == epoch {
				return time.Now(), nil
			}
		}
		if p.exitedEarly() {
			return time.Time{}, p.failure(fmt.Errorf("%s exited before /server_info said epoch %d LIVE: %v", p.name, epoch, p.Err()))
		}
		if time.Now().After(deadline) {
			return time.Time{}, p.failure(fmt.Errorf("%s did not say epoch %d LIVE within %s", u, epoch, timeout))
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("waiting for %s: %w", u, ctx.Err())
		case <-tick.C:
		}
	}
}

// quitAgent stops an agent with POST /quitquitquit on its control socket
// (no drain), SIGKILL if it is not gone within 15s.
func quitAgent(ctx context.Context, p *proc, controlSocket string) error {
	if p.exitedEarly() {
		return nil
	}
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	unix := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", controlSocket)
		}}}
	err := post(qctx, unix, "http://envoy-agent/quitquitquit")
	cancel()
	if err != nil {
		p.Signal(syscall.SIGTERM)
	}
	if werr := p.wait(ctx, 15*time.Second); werr != nil {
		p.Kill()
		return errors.Join(err, werr)
	}
	return nil
}
