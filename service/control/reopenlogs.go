//go:build linux

package control

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/envoy-agent/envoy-agent/service/config"
)

// ReopenTimeout bounds a log reopening: it waits for a hot restart under way (bounded by
// start_timeout) and then takes one admin request, so the client allows the start timeout and
// this much more.
const ReopenTimeout = 10 * time.Second

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

// RequestReopenLogs is `envoy-agent reopen-logs`: it asks the agent running with the
// configuration at path to have every Envoy epoch reopen its log files, and prints the outcome.
func RequestReopenLogs(ctx context.Context, path string, out io.Writer) error {
	cfg, err := config.LoadUnchecked(path)
	if err != nil {
		return err
	}
	url := cfg.ControlSocketPath()
	ctx, cancel := context.WithTimeout(ctx, cfg.Agent.StartTimeout.D()+ReopenTimeout)
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
