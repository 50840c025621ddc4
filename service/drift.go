//go:build linux

package service

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy"
	"github.com/envoy-agent/envoy-agent/internal/safefile"
	"github.com/envoy-agent/envoy-agent/service/config"
	"github.com/envoy-agent/envoy-agent/service/control"
)

// servedFiles are the files of the configuration in force as they were
// when it came in: the SHA-256 (hex) of the TOML it was loaded from and
// of the bootstrap then. "" is unknown: a configuration handed over by a
// live upgrade was not loaded by this process, and its files may have
// been edited since.
type servedFiles struct {
	at                time.Time
	config, bootstrap string
}

// filesOf are c's files now, as c comes into force.
func filesOf(c *config.Config, at time.Time) servedFiles {
	f := servedFiles{at: at, config: c.Sum()}
	if f.config == "" {
		return f
	}
	if sum, err := bootstrapSum(c.Envoy.ConfigPath); err == nil {
		f.bootstrap = sum
	}
	return f
}

// bootstrapSum is the SHA-256 (hex) of the bootstrap at path, read as a
// reload reads it.
func bootstrapSum(path string) (string, error) {
	data, err := safefile.ReadRegular(path, envoy.MaxBootstrapSize)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}

// filesStatus compares cfg's files on disk with served, the files of cfg
// when it came into force, and says why they differ from last, the last
// reload: a reload of these files (begun after they were last written)
// that failed or was rolled back; else an edit not reloaded yet.
func filesStatus(cfg *config.Config, served servedFiles, last *control.ReloadStatus) control.FilesStatus {
	st := control.FilesStatus{State: control.FilesInSync,
		Config:    fileStatus(cfg.File, served.config, config.FileSum),
		Bootstrap: fileStatus(cfg.Envoy.ConfigPath, served.bootstrap, bootstrapSum)}
	if !served.at.IsZero() {
		st.ServedSince = served.at.UTC().Format(time.RFC3339Nano)
	}
	if served.config == "" {
		st.State = control.FilesUnknown
		st.Reason = "the configuration in force was handed over by a live upgrade of the agent: its files may have been edited before; the next reload tells"
		return st
	}
	var newest time.Time
	var differ []string
	for _, f := range []control.FileStatus{st.Config, st.Bootstrap} {
		if !f.Differs {
			continue
		}
		differ = append(differ, f.Path)
		if m, err := time.Parse(time.RFC3339Nano, f.Modified); err == nil && m.After(newest) {
			newest = m
		}
	}
	if len(differ) == 0 {
		return st
	}
	st.State = control.FilesDiffer
	var began time.Time
	if last != nil {
		began, _ = time.Parse(time.RFC3339Nano, last.At)
	}
	tried := last != nil && !newest.After(began) // that reload read these files
	switch {
	case tried && last.Outcome == control.OutcomeRolledBack && last.Rollback != nil:
		st.Reason = fmt.Sprintf("the reload of these files at %s was rolled back by the reload guard: %s", last.At, last.Rollback.Reason)
	case tried && !last.OK:
		st.Reason = fmt.Sprintf("the reload of these files at %s failed: %s", last.At, firstLine(last.Error))
	default:
		st.Reason = fmt.Sprintf("edited at %s, after Envoy took the configuration at %s: not reloaded yet", newest.UTC().Format(time.RFC3339), served.at.UTC().Format(time.RFC3339))
	}
	st.Reason += fmt.Sprintf("; Envoy serves the configuration from before (%d files differ)", len(differ))
	return st
}

// fileStatus is the file at path against served, its sum when it came
// into force ("" unknown), read with sum.
func fileStatus(path, served string, sum func(string) (string, error)) control.FileStatus {
	f := control.FileStatus{Path: path, ServedSHA256: served}
	if fi, err := os.Stat(path); err == nil {
		f.Modified = fi.ModTime().UTC().Format(time.RFC3339Nano)
	}
	now, err := sum(path)
	if err != nil {
		f.Error = err.Error()
	}
	f.SHA256 = now
	f.Differs = served != "" && now != served
	return f
}

// driftedFiles is how many of the files differ from what Envoy serves,
// for the metric (0 when unknown).
func (s *supervisor) driftedFiles() int {
	st := s.filesStatus()
	n := 0
	for _, f := range []control.FileStatus{st.Config, st.Bootstrap} {
		if f.Differs {
			n++
		}
	}
	return n
}

// filesStatus is filesStatus for the configuration in force now.
func (s *supervisor) filesStatus() control.FilesStatus {
	cfg, served := s.served()
	s.report.mu.Lock()
	last := s.report.lastReload
	s.report.mu.Unlock()
	return filesStatus(cfg, served, last)
}
