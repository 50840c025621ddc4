//go:build linux

package control

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestFormatStatusReloadOutcomes: the text of each outcome of the last
// reload, and of the files against what Envoy serves; their JSON names.
func TestFormatStatusReloadOutcomes(t *testing.T) {
	base := StatusReport{SchemaVersion: StatusSchemaVersion, State: StateLive, Agent: AgentStatus{Config: "/etc/envoy-agent/config.toml"}}
	rolledBack := &ReloadStatus{At: "2026-12-06T10:00:00Z", TookMs: 52, OK: true, Epoch: 0, Path: PathInPlace, Changed: "routes updated ingress/0/0",
		Outcome: OutcomeRolledBack, Rollback: &RollbackStatus{At: "2026-12-06T10:00:03Z", Path: PathInPlace, TookMs: 6,
			Reason:   "cluster dead: 5xx answers: 0% of 0 requests (too few to compare) before the reload, 100% of 908 requests after",
			Findings: []GuardFinding{{Signal: "upstream_5xx", Subject: "dead", Before: "0% of 0 requests (too few to compare)", After: "100% of 908 requests"}}}}
	for _, tc := range []struct {
		name   string
		reload *ReloadStatus
		files  *FilesStatus
		want   []string
	}{
		{"rolled back", rolledBack,
			&FilesStatus{State: FilesDiffer, Config: FileStatus{Path: "/etc/envoy-agent/config.toml"}, Bootstrap: FileStatus{Path: "/etc/envoy-agent/envoy.yaml", Differs: true},
				Reason: "the reload of these files at 2026-12-06T10:00:00Z was rolled back by the reload guard: ..."},
			[]string{
				"  last reload:  2026-12-06T10:00:00Z: ROLLED BACK by the reload guard at 2026-12-06T10:00:03Z (in place in 6 ms), epoch 0 serves the configuration from before: cluster dead: 5xx answers: 0% of 0 requests (too few to compare) before the reload, 100% of 908 requests after\n",
				"  files:        /etc/envoy-agent/envoy.yaml NOT what Envoy serves: the reload of these files at 2026-12-06T10:00:00Z was rolled back by the reload guard: ...\n",
			}},
		{"rollback failed", &ReloadStatus{At: "2026-12-06T10:00:00Z", OK: true, Epoch: 1, Outcome: OutcomeRolledBack,
			Rollback: &RollbackStatus{At: "2026-12-06T10:00:03Z", Path: PathHotRestart, Reason: "5xx answers: ...", Error: "epoch 2 was not LIVE"}}, nil,
			[]string{"  last reload:  2026-12-06T10:00:00Z: the reload guard saw a regression at 2026-12-06T10:00:03Z and its rollback FAILED: epoch 2 was not LIVE; the reloaded configuration serves (epoch 1); regression: 5xx answers: ...\n"}},
		{"guarding", &ReloadStatus{At: "2026-12-06T10:00:00Z", TookMs: 50, OK: true, Epoch: 0, Path: PathInPlace, Changed: "nothing changed",
			Outcome: OutcomeGuarding, GuardEnds: "2026-12-06T10:00:10Z"},
			&FilesStatus{State: FilesInSync, ServedSince: "2026-12-06T10:00:00Z"},
			[]string{
				"  last reload:  2026-12-06T10:00:00Z: ok in place in 50 ms (nothing changed), epoch 0 serving; the reload guard watches it until 2026-12-06T10:00:10Z\n",
				"  files:        as Envoy serves them (taken 2026-12-06T10:00:00Z)\n",
			}},
		{"failed", &ReloadStatus{At: "2026-12-06T10:00:00Z", TookMs: 40, Epoch: 0, Outcome: OutcomeFailed, Error: "Envoy rejected the change\nmore"},
			&FilesStatus{State: FilesUnknown, Reason: "the configuration in force was handed over by a live upgrade"},
			[]string{
				"  last reload:  2026-12-06T10:00:00Z: FAILED after 40 ms, epoch 0 kept serving: Envoy rejected the change\n",
				"  files:        unknown: the configuration in force was handed over by a live upgrade\n",
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := base
			rep.LastReload, rep.Files = tc.reload, tc.files
			out := FormatStatus(rep)
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("status lacks %q:\n%s", w, out)
				}
			}
		})
	}
	rep := base
	rep.LastReload = rolledBack
	rep.Files = &FilesStatus{State: FilesDiffer, Bootstrap: FileStatus{Differs: true}}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{`"outcome":"rolled_back"`, `"rollback":{"at":"2026-12-06T10:00:03Z","reason":"cluster dead: 5xx answers:`,
		`"findings":[{"signal":"upstream_5xx","subject":"dead"`, `"files":{"state":"differ"`, `"bootstrap":{"path":"","differs":true}`} {
		if !strings.Contains(string(b), w) {
			t.Errorf("the JSON lacks %s:\n%s", w, b)
		}
	}
}
