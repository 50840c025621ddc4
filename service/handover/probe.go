//go:build linux

package handover

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/envoy-agent/envoy-agent/service/control"
)

// ErrCannotHandOver marks a new binary that predates the handover or speaks
// no handover version this agent writes: the upgrade falls back to a
// drained restart.
var ErrCannotHandOver = errors.New("cannot hand over")

// ExitUsage is envoy-agent's exit status for a command-line error (an
// unknown flag): cmd/envoy-agent exits with it, and so an agent older than
// the handover answers --handover (ProbeBinary tells it so).
const ExitUsage = 2

// ProbeBinary runs `EXE version --handover` (exe is the new binary's file,
// named binary in messages) and returns the binary's version when it reads
// this agent's handover format, and check when it also answers
// `version --handover-check` (CheckBinary). The probe runs in a process
// group of its own, killed whole at ctx's end and once it has answered, so
// a probe that hangs, or leaves a child holding its output, is refused
// within control.UpgradeCheckTimeout (it once took 100 s, until the child
// exited). An error wrapping ErrCannotHandOver means the binary runs but
// cannot take a handover.
func ProbeBinary(ctx context.Context, binary, exe string) (version string, check bool, err error) {
	text, err := runProbe(ctx, exe, "version", "--handover")
	if ctx.Err() != nil {
		return "", false, fmt.Errorf("the new %s does not run: `version --handover` did not answer within %s", binary, control.UpgradeCheckTimeout)
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == ExitUsage && strings.Contains(text, "-handover") {
			return "", false, fmt.Errorf("%w: the new %s predates live upgrades (no version --handover)", ErrCannotHandOver, binary)
		}
		return "", false, fmt.Errorf("the new %s does not run: `version --handover`: %w: %s", binary, err, truncateText(text, 200))
	}
	version, versions, err := parseVersionText(text)
	if err != nil {
		return "", false, fmt.Errorf("the new %s: `version --handover`: %w", binary, err)
	}
	if !slices.Contains(versions, formatVersion) {
		return "", false, fmt.Errorf("%w: the new %s (envoy-agent %s) reads handover versions %v, this agent writes %d", ErrCannotHandOver, binary, version, versions, formatVersion)
	}
	return version, strings.Contains(text, "\n"+checkLine), nil
}

// CheckBinary runs `EXE version --handover-check STATE`: the new binary
// reads the state it is about to be handed, as it will after the exec
// (CheckState). It runs as ProbeBinary's probe does.
func CheckBinary(ctx context.Context, binary, exe, state string) error {
	text, err := runProbe(ctx, exe, "version", "--handover-check", state)
	if ctx.Err() != nil {
		return fmt.Errorf("the new %s cannot take over: `version --handover-check` did not answer within %s", binary, control.UpgradeCheckTimeout)
	}
	if err != nil {
		return fmt.Errorf("the new %s cannot take over: `version --handover-check`: %w: %s", binary, err, truncateText(text, 200))
	}
	return nil
}

// runProbe runs exe with args and returns its output, trimmed. It runs in
// a process group of its own, killed whole at ctx's end and once it has
// answered.
func runProbe(ctx context.Context, exe string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = probeWaitDelay
	out, err := cmd.CombinedOutput()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // what it left behind
	}
	return strings.TrimSpace(string(out)), err
}

// probeWaitDelay is how long a probe's output may stay open after the
// probe was killed or exited (a child outside its group holding it).
const probeWaitDelay = time.Second

// VersionText is what `envoy-agent version --handover` prints for an agent
// of the given version: its version, the handover versions it reads, and
// that it answers `version --handover-check` (ProbeBinary reads it).
func VersionText(version string) string {
	vs := make([]string, len(formatVersions))
	for i, v := range formatVersions {
		vs[i] = strconv.Itoa(v)
	}
	return fmt.Sprintf("envoy-agent %s\nhandover %s\n%s\n", version, strings.Join(vs, " "), checkLine)
}

// checkLine in `version --handover` says the binary answers
// `version --handover-check STATE` (older agents ignore the line).
const checkLine = "check --handover-check"

// parseVersionText reads VersionText's output.
func parseVersionText(text string) (version string, versions []int, err error) {
	for _, line := range strings.Split(text, "\n") {
		fields := strings.Fields(line)
		switch {
		case len(fields) == 2 && fields[0] == "envoy-agent":
			version = fields[1]
		case len(fields) >= 2 && fields[0] == "handover":
			for _, f := range fields[1:] {
				v, err := strconv.Atoi(f)
				if err != nil {
					return "", nil, fmt.Errorf("bad handover version %q", f)
				}
				versions = append(versions, v)
			}
		}
	}
	if version == "" || len(versions) == 0 {
		return "", nil, fmt.Errorf("unexpected answer %q", truncateText(text, 200))
	}
	return version, versions, nil
}

func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
