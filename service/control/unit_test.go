//go:build linux

package control

import (
	"context"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestUnitRestartsParsesSystemctl: systemctl's answer, read through a
// stand-in for systemctl (this machine has no systemd as PID 1, so the real
// one cannot answer; the e2e test's booted Debian has one).
func TestUnitRestartsParsesSystemctl(t *testing.T) {
	real := runSystemctl
	t.Cleanup(func() { runSystemctl = real })
	for _, tc := range []struct {
		unit string
		out  string
		err  error
		want int // -1: nil
	}{
		{"envoy-agent.service", "3\n", nil, 3},
		{"envoy-agent@edge.service", "0\n", nil, 0},
		{"envoy-agent.service", "", errors.New("exit status 1"), -1},
		{"envoy-agent.service", "[not set]\n", nil, -1},
		{"", "3\n", nil, -1},
		{"--user", "3\n", nil, -1},
	} {
		var args []string
		runSystemctl = func(_ context.Context, a ...string) ([]byte, error) {
			args = a
			return []byte(tc.out), tc.err
		}
		got := unitRestarts(context.Background(), tc.unit)
		switch {
		case tc.want < 0 && got != nil:
			t.Errorf("unit %q, systemctl %q %v: %d, want none", tc.unit, tc.out, tc.err, *got)
		case tc.want >= 0 && (got == nil || *got != tc.want):
			t.Errorf("unit %q, systemctl %q: %v, want %d", tc.unit, tc.out, got, tc.want)
		case tc.want >= 0 && !slices.Equal(args, []string{"show", "--property=NRestarts", "--value", "--", tc.unit}):
			t.Errorf("systemctl args %q", args)
		}
	}
}

// TestUnitRestartsWithoutSystemd: the real systemctl, where systemd is not
// PID 1 (this machine), gives no count and no error.
func TestUnitRestartsWithoutSystemd(t *testing.T) {
	if _, err := exec.LookPath("systemctl"); err != nil {
		t.Skip("no systemctl")
	}
	if out, err := exec.Command("systemctl", "is-system-running").Output(); err == nil || strings.TrimSpace(string(out)) != "offline" {
		t.Skipf("systemd may be running here (%q, %v)", out, err)
	}
	if got := unitRestarts(context.Background(), "envoy-agent.service"); got != nil {
		t.Errorf("restarts %d without systemd", *got)
	}
}

func TestFormatStatusUnitAndPreviousExit(t *testing.T) {
	three := 3
	rep := StatusReport{SchemaVersion: StatusSchemaVersion, State: "running", Agent: AgentStatus{
		Config: "/etc/envoy-agent/config.toml", Unit: "envoy-agent.service", Restarts: &three,
		PreviousExit: &PreviousExit{At: "2026-12-04T18:00:00Z", Pid: 41, Reason: "envoy (pid 42, epoch 0) exited by itself after 3s: signal: segmentation fault (SIGSEGV; no core dumped)"},
	}}
	out := FormatStatus(rep)
	for _, want := range []string{
		"  unit:         envoy-agent.service, restarted 3 times by systemd (NRestarts)\n",
		"  last exit:    2026-12-04T18:00:00Z, agent pid 41: envoy (pid 42, epoch 0) exited by itself after 3s: signal: segmentation fault (SIGSEGV; no core dumped)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	rep.Agent.Unit, rep.Agent.Restarts, rep.Agent.PreviousExit = "", nil, nil
	if out := FormatStatus(rep); strings.Contains(out, "unit:") || strings.Contains(out, "last exit:") {
		t.Errorf("outside systemd, with no previous exit:\n%s", out)
	}
	rep.Agent.Unit = "envoy-agent.service"
	if out := FormatStatus(rep); !strings.Contains(out, "envoy-agent.service, systemd's restart count unknown") {
		t.Errorf("unknown restarts:\n%s", out)
	}
}
