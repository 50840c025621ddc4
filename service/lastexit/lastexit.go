//go:build linux

// Package lastexit keeps why the agent's last run ended, so that the next
// run's `envoy-agent status` can say it: a small JSON file in the unit's
// state directory (systemd's StateDirectory=, given in $STATE_DIRECTORY),
// written when the agent exits. Outside systemd, with no state directory,
// nothing is kept and nothing is reported.
package lastexit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/safefile"
)

// EnvStateDirectory is systemd's variable naming the unit's state
// directories (colon-separated; the first is the agent's).
const EnvStateDirectory = "STATE_DIRECTORY"

// maxReason bounds the reason kept: the first line of the agent's error.
const maxReason = 1024

// Record is one run's end.
type Record struct {
	At     string `json:"at"`     // RFC 3339
	Pid    int    `json:"pid"`    // the agent's
	Reason string `json:"reason"` // the first line of the agent's error (without Envoy's last lines), or "stopped"
}

// Path is the record's file for the agent instance (ENVOY_AGENT_INSTANCE:
// envoy-agent@NAME shares the state directory with the other instances),
// "" when there is no state directory.
func Path(instance string) string {
	dir, _, _ := strings.Cut(os.Getenv(EnvStateDirectory), ":")
	if dir == "" {
		return ""
	}
	name := "last-exit.json"
	if instance != "" {
		name = "last-exit@" + instance + ".json"
	}
	return filepath.Join(dir, name)
}

// Write records that this run ends because of err (nil: a clean stop) at
// path, replacing the previous record; an empty path writes nothing.
func Write(path string, err error) error {
	if path == "" {
		return nil
	}
	reason := "stopped"
	if err != nil {
		reason, _, _ = strings.Cut(err.Error(), "\n")
		// Envoy's last lines follow on the next lines (the journal has them): not kept.
		reason = strings.TrimSuffix(reason, "; its last log lines:")
		reason = reason[:min(len(reason), maxReason)]
	}
	data, jerr := json.Marshal(Record{At: time.Now().UTC().Format(time.RFC3339), Pid: os.Getpid(), Reason: reason})
	if jerr != nil {
		return fmt.Errorf("last exit: %w", jerr)
	}
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	if werr := safefile.CreatePrivate(tmp, append(data, '\n')); werr != nil {
		return fmt.Errorf("last exit: %w", werr)
	}
	if rerr := os.Rename(tmp, path); rerr != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("last exit: %w", rerr)
	}
	return nil
}

// Read returns the record at path: nil with no error when there is none (no
// state directory, or no run has ended yet).
func Read(path string) (*Record, error) {
	if path == "" {
		return nil, nil
	}
	data, err := safefile.ReadRegular(path, 8*maxReason)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("last exit: %w", err)
	}
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("last exit: %s: %w", path, err)
	}
	return &r, nil
}
