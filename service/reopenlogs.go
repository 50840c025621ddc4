//go:build linux

package service

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// reopenTimeout bounds a log reopening: it waits for a hot restart under way (bounded by
// start_timeout) and then takes one admin request, so the client allows the start timeout and
// this much more.
const reopenTimeout = 10 * time.Second

// ReopenResult is the outcome of a log reopening, as `envoy-agent reopen-logs` and the log
// report it.
type ReopenResult struct {
	OK     bool   `json:"ok"`
	Epochs int    `json:"epochs"` // how many Envoy epochs were told to reopen
	Error  string `json:"error,omitempty"`
}

// ReopenError is a log reopening that failed for at least one epoch.
type ReopenError struct {
	Result ReopenResult
}

func (e *ReopenError) Error() string {
	return fmt.Sprintf("reopening Envoy's logs failed (%d epochs reopened): %s", e.Result.Epochs, e.Result.Error)
}

// reopenLogs has every live Envoy epoch reopen its log files (SIGUSR1, POST /reopen_logs).
func (s *supervisor) reopenLogs(ctx context.Context) ReopenResult {
	if !s.isLive() || s.agent.Draining() {
		res := ReopenResult{Error: "envoy is not serving (starting or stopping): no logs to reopen"}
		s.log.Warnf("reopening logs refused: %s", res.Error)
		return res
	}
	ctx, cancel := context.WithTimeout(ctx, reopenTimeout)
	defer cancel()
	n, err := s.proxy.ReopenLogs(ctx)
	if err != nil {
		s.log.WithField("epochs", n).Errorf("reopening envoy's logs: %v", err)
		return ReopenResult{Epochs: n, Error: err.Error()}
	}
	s.log.WithField("epochs", n).Infof("envoy reopened its log files")
	return ReopenResult{OK: true, Epochs: n}
}

// RequestReopenLogs is `envoy-agent reopen-logs`: it asks the agent running with the
// configuration at path to have every Envoy epoch reopen its log files, and prints the outcome.
func RequestReopenLogs(ctx context.Context, path string, out io.Writer) error {
	cfg, err := clientConfig(path)
	if err != nil {
		return err
	}
	url := cfg.controlSocket()
	ctx, cancel := context.WithTimeout(ctx, cfg.Agent.StartTimeout.D()+reopenTimeout)
	defer cancel()
	resp, server, err := controlPost(ctx, url, "/reopen_logs")
	if err != nil {
		return fmt.Errorf("reopen-logs: cannot reach the agent on its control socket %s (is envoy-agent running with %s?): %w", url, path, err)
	}
	defer resp.Body.Close()
	if err := checkControlIdentity(resp, server, path); err != nil {
		return fmt.Errorf("reopen-logs: %s: %w", url, err)
	}
	var res ReopenResult
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&res); err != nil {
		return fmt.Errorf("reopen-logs: the agent at %s answered %s, not a result: %w", url, resp.Status, err)
	}
	if !res.OK {
		return &ReopenError{Result: res}
	}
	fmt.Fprintf(out, "reopened: %d epochs\n", res.Epochs)
	return nil
}
