//go:build linux

package service

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/service/config"
	"github.com/envoy-agent/envoy-agent/service/control"
)

// TestFilesStatus: the files on disk against those of the configuration in
// force, and why they differ, from the last reload.
func TestFilesStatus(t *testing.T) {
	dir := t.TempDir()
	cfg := config.DefaultConfig()
	cfg.File, cfg.Envoy.ConfigPath = filepath.Join(dir, "config.toml"), filepath.Join(dir, "envoy.yaml")
	write := func(path, text string, at time.Time) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, at, at); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	write(cfg.File, "[agent]\n", t0)
	write(cfg.Envoy.ConfigPath, "static_resources: {}\n", t0)
	tomlSum, err := config.FileSum(cfg.File)
	if err != nil {
		t.Fatal(err)
	}
	bootSum, err := bootstrapSum(cfg.Envoy.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	served := servedFiles{at: t0.Add(time.Minute), config: tomlSum, bootstrap: bootSum}
	at := func(d time.Duration) string { return t0.Add(d).UTC().Format(time.RFC3339Nano) }

	if st := filesStatus(&cfg, served, nil, servedFiles{}); st.State != control.FilesInSync || st.Config.Differs || st.Bootstrap.Differs || st.Reason != "" {
		t.Fatalf("untouched files: %+v", st)
	}
	write(cfg.Envoy.ConfigPath, "static_resources: { listeners: [] }\n", t0.Add(10*time.Minute))
	edited, err := bootstrapSum(cfg.Envoy.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	// What a reload read: these files, or those before the edit.
	these, before := servedFiles{config: tomlSum, bootstrap: edited}, servedFiles{config: tomlSum, bootstrap: bootSum}
	for _, tc := range []struct {
		name  string
		last  *control.ReloadStatus
		tried servedFiles
		want  string
	}{
		{"edited, no reload since", &control.ReloadStatus{At: at(5 * time.Minute), OK: true, Outcome: control.OutcomeOK}, before,
			"edited at " + t0.Add(10*time.Minute).UTC().Format(time.RFC3339) + ", after Envoy took the configuration at " + t0.Add(time.Minute).UTC().Format(time.RFC3339) + ": not reloaded yet"},
		{"a reload of them failed", &control.ReloadStatus{At: at(11 * time.Minute), Outcome: control.OutcomeFailed, Error: "Envoy rejected the change: listener taken\nmore"}, these,
			"the reload of these files at " + at(11*time.Minute) + " failed: Envoy rejected the change: listener taken; Envoy serves the configuration from before (1 files differ)"},
		{"a reload of them was rolled back", &control.ReloadStatus{At: at(11 * time.Minute), OK: true, Outcome: control.OutcomeRolledBack,
			Rollback: &control.RollbackStatus{Reason: "5xx answers: 0% of 900 requests before the reload, 100% of 300 requests after"}}, these,
			"the reload of these files at " + at(11*time.Minute) + " was rolled back by the reload guard: 5xx answers: 0% of 900"},
		// Its time is after the edit's: the sums, not the times, tell.
		{"a reload of other bytes failed", &control.ReloadStatus{At: at(11 * time.Minute), Outcome: control.OutcomeFailed, Error: "bad"}, servedFiles{config: tomlSum, bootstrap: "other"},
			"not reloaded yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := filesStatus(&cfg, served, tc.last, tc.tried)
			if st.State != control.FilesDiffer || st.Config.Differs || !st.Bootstrap.Differs || !strings.Contains(st.Reason, tc.want) {
				t.Errorf("%+v\nwant the bootstrap differing: %q", st, tc.want)
			}
			if st.Bootstrap.ServedSHA256 != bootSum || st.Bootstrap.SHA256 == bootSum || st.Bootstrap.Modified != at(10*time.Minute) {
				t.Errorf("bootstrap %+v", st.Bootstrap)
			}
		})
	}
	if st := filesStatus(&cfg, servedFiles{}, nil, servedFiles{}); st.State != control.FilesUnknown || st.Bootstrap.Differs || !strings.Contains(st.Reason, "live upgrade") {
		t.Errorf("a configuration handed over: %+v", st)
	}
	os.Remove(cfg.File)
	if st := filesStatus(&cfg, served, nil, servedFiles{}); st.State != control.FilesDiffer || !st.Config.Differs || st.Config.Error == "" {
		t.Errorf("the TOML gone: %+v", st)
	}
}

// TestStatePutBack: a rollback puts back the configuration of before with
// its files as they were, not as they are on disk.
func TestStatePutBack(t *testing.T) {
	before := config.DefaultConfig()
	st := &state{cfg: &before, files: servedFiles{config: "aa", bootstrap: "bb"}, hrVersion: "11.104"}
	saved := st.current()
	after := config.DefaultConfig()
	st.reloaded(&after, "11.104", servedFiles{})
	if cfg, files := st.served(); cfg != &after || files.config != "" {
		t.Fatalf("after the reload: %p %+v", cfg, files)
	}
	st.putBack(saved)
	if cfg, files := st.served(); cfg != &before || files.config != "aa" || files.bootstrap != "bb" || st.hotRestartVersion() != "11.104" {
		t.Errorf("put back: %p %+v", cfg, files)
	}
}
