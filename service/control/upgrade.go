//go:build linux

package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"syscall"
	"time"

	"github.com/envoy-agent/envoy-agent/service/config"
)

// upgradePoll is how often `envoy-agent upgrade` asks the re-executed
// agent whether it is serving yet (it takes tens of milliseconds).
const upgradePoll = 50 * time.Millisecond

// FallbackError is an upgrade the running agent cannot do live: it
// predates live upgrades, or it and the new binary share no handover
// version. A drained restart (`systemctl restart`) is the way; the caller
// decides (`envoy-agent upgrade` exits 4).
type FallbackError struct{ Reason string }

func (e *FallbackError) Error() string {
	return "the running agent cannot hand over (" + e.Reason + "): a restart (with a drain) is needed to switch"
}

// RequestUpgrade is `envoy-agent upgrade`: it asks the agent running with
// the configuration at path to re-execute its binary (now the installed
// one) with Envoy kept, waits until the new agent serves, and prints the
// outcome.
func RequestUpgrade(ctx context.Context, path string, out io.Writer) error {
	cfg, err := config.LoadUnchecked(path)
	if err != nil {
		return err
	}
	url := cfg.ControlSocketPath()
	ctx, cancel := context.WithTimeout(ctx, cfg.Agent.StartTimeout.D()+2*UpgradeCheckTimeout)
	defer cancel()
	start := time.Now()
	resp, server, err := controlPost(ctx, url, "/upgrade")
	if err != nil {
		// An agent from before this release has no control socket (its
		// routes were on the status port, without /upgrade).
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return &FallbackError{Reason: "it predates live upgrades: no agent answers on " + url}
		}
		return fmt.Errorf("upgrade: cannot reach the agent on %s (is envoy-agent running with %s?): %w", url, path, err)
	}
	if err := checkControlIdentity(resp, server, path); err != nil {
		resp.Body.Close()
		return fmt.Errorf("upgrade: %s: %w", url, err)
	}
	if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
		resp.Body.Close()
		return &FallbackError{Reason: "it predates live upgrades: " + url + " answered " + resp.Status}
	}
	var ans UpgradeAnswer
	err = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&ans)
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("upgrade: the agent at %s answered %s, not an upgrade answer: %w", url, resp.Status, err)
	}
	if ans.Fallback {
		return &FallbackError{Reason: ans.Error}
	}
	if !ans.OK {
		return fmt.Errorf("upgrade refused; envoy-agent %s (pid %d) keeps serving Envoy pid %d: %s", ans.Version, ans.Pid, ans.EnvoyPid, ans.Error)
	}
	// The agent re-executes now; its listener stays open across the exec,
	// so the next answers come from the new agent once it serves.
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("upgrade: envoy-agent %s did not report serving in time: %w", ans.To, ctx.Err())
		case <-time.After(upgradePoll):
		}
		now, err := getUpgradeInfo(ctx, url)
		if err != nil {
			continue // the exec under way
		}
		if now.ImageStarted != ans.ImageStarted && now.Version == ans.To && now.Pid == ans.Pid && now.Live {
			kept := "kept"
			if now.EnvoyPid != ans.EnvoyPid {
				kept = fmt.Sprintf("now pid %d, epoch %d", now.EnvoyPid, now.Epoch)
			}
			fmt.Fprintf(out, "upgraded: envoy-agent %s -> %s in pid %d; Envoy pid %d (epoch %d) %s (%d ms)\n",
				ans.Version, now.Version, now.Pid, ans.EnvoyPid, ans.Epoch, kept, time.Since(start).Milliseconds())
			return nil
		}
		if now.ImageStarted == ans.ImageStarted && now.LastUpgradeError != "" {
			return errors.New("upgrade failed; envoy-agent " + ans.Version + " keeps serving: " + now.LastUpgradeError)
		}
	}
}

func getUpgradeInfo(ctx context.Context, url string) (UpgradeAnswer, error) {
	var ans UpgradeAnswer
	resp, _, err := controlRequest(ctx, url, http.MethodGet, "/upgrade", "")
	if err != nil {
		return ans, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ans, fmt.Errorf("%s", resp.Status)
	}
	err = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&ans)
	return ans, err
}

// UpgradeAnswer is what /upgrade answers, as JSON: to a POST, whether the
// agent hands over (then it re-executes right after answering); to a GET,
// what is running now.
type UpgradeAnswer struct {
	OK       bool   `json:"ok"`
	Fallback bool   `json:"fallback,omitempty"` // the agent cannot hand over: a drained restart is the way
	Error    string `json:"error,omitempty"`

	Version          string `json:"version"`      // the running agent's
	To               string `json:"to,omitempty"` // the version being handed over to
	Pid              int    `json:"pid"`
	EnvoyPid         int    `json:"envoy_pid"`
	Epoch            int    `json:"epoch"`
	Live             bool   `json:"live"`
	AdoptedFrom      string `json:"adopted_from,omitempty"` // the agent version that handed over to this one
	LastUpgradeError string `json:"last_upgrade_error,omitempty"`
	// ImageStarted tells one program image from the next in the same pid.
	ImageStarted int64 `json:"image_started_unix_nano"`
}

// UpgradeCheckTimeout bounds `NEW-BINARY version --handover`, the check a
// new binary must pass before the agent execs it: a Go binary answers in
// milliseconds, so one that takes this long is broken.
const UpgradeCheckTimeout = 10 * time.Second
