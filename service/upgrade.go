//go:build linux

package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/envoy-agent/envoy-agent/service/control"
)

// upgradeState guards the live upgrade: one at a time.
type upgradeState struct {
	mu      sync.Mutex
	running bool
	lastErr string // why the last upgrade was refused or failed
	// binary is the new agent's file, opened before it was probed: what
	// runUpgrade executes.
	binary *os.File
	// check: the new binary can read the state before the exec
	// (version --handover-check).
	check bool
}

// imageStarted is when this program image started (a re-exec starts anew).
var imageStarted = time.Now().UnixNano()

// errCannotHandOver marks a new binary that predates the handover or speaks
// no handover version this agent writes.
var errCannotHandOver = errors.New("cannot hand over")

// upgradeHandler is the /upgrade route, mountable on any router: GET says
// what runs; POST checks the agent's binary (as installed now) and, when it
// can take over, answers 202 and re-executes it with Envoy kept.
func (s *supervisor) upgradeHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.Method {
		case http.MethodGet:
			_ = json.NewEncoder(w).Encode(s.upgradeInfo())
		case http.MethodPost:
			ans := s.prepareUpgrade(r.Context())
			if !ans.OK {
				w.WriteHeader(http.StatusConflict)
				_ = json.NewEncoder(w).Encode(ans)
				return
			}
			w.WriteHeader(http.StatusAccepted)
			_ = json.NewEncoder(w).Encode(ans)
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
			s.runUpgrade(ans.To)
		default:
			w.Header().Set("Allow", "GET, POST")
			http.Error(w, "method not allowed: use GET or POST", http.StatusMethodNotAllowed)
		}
	})
}

func (s *supervisor) upgradeInfo() control.UpgradeAnswer {
	s.up.mu.Lock()
	lastErr := s.up.lastErr
	s.up.mu.Unlock()
	a := control.UpgradeAnswer{OK: true, Version: s.version, Pid: os.Getpid(), EnvoyPid: s.proxy.Pid(), Epoch: s.proxy.Epoch(),
		Live: s.live() && !s.agent.Draining(), LastUpgradeError: lastErr, ImageStarted: imageStarted}
	if s.handover != nil {
		a.AdoptedFrom = s.handover.FromAgentVersion
	}
	return a
}

// prepareUpgrade checks that a live upgrade can go ahead; with OK set, the
// caller must call runUpgrade.
func (s *supervisor) prepareUpgrade(ctx context.Context) control.UpgradeAnswer {
	ans := s.upgradeInfo()
	ans.OK, ans.LastUpgradeError = false, ""
	if !ans.Live {
		ans.Error = "envoy is not serving (starting or stopping): nothing to hand over"
		s.log.Warnf("upgrade refused: %s", ans.Error)
		return ans
	}
	s.up.mu.Lock()
	if s.up.running {
		s.up.mu.Unlock()
		ans.Error = "an upgrade is under way"
		return ans
	}
	s.up.running = true
	s.up.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, control.UpgradeCheckTimeout)
	defer cancel()
	// The file probed is the file executed: an fd opened now, probed and
	// then executed through /proc, so a file renamed over the path in
	// between (a package manager's next run, a truncated copy) is not run.
	bin, err := os.Open(s.selfPath)
	var to string
	var check bool
	if err == nil {
		to, check, err = probeBinary(ctx, s.selfPath, fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), bin.Fd()))
		if err != nil {
			bin.Close()
		}
	}
	if err == nil {
		s.up.mu.Lock()
		s.up.binary, s.up.check = bin, check
		s.up.lastErr = "" // the client waits for this upgrade's outcome, not an earlier one's
		s.up.mu.Unlock()
		ans.OK, ans.To = true, to
		return ans
	}
	s.up.mu.Lock()
	s.up.running = false
	s.up.lastErr = err.Error()
	s.up.mu.Unlock()
	ans.Error = err.Error()
	if errors.Is(err, errCannotHandOver) {
		ans.Fallback = true
		s.log.Warnf("upgrade: %v; falling back to a drained restart", err)
		return ans
	}
	s.log.Errorf("upgrade refused, envoy-agent %s keeps serving: %v", s.version, err)
	s.notify.Status(fmt.Sprintf("%s; upgrade refused: %s", s.liveStatus(), firstLine(err.Error())))
	return ans
}

// runUpgrade re-executes the agent's binary; it returns only when that
// failed, with the old agent still in charge.
func (s *supervisor) runUpgrade(to string) {
	s.notify.Reloading(fmt.Sprintf("upgrading: handing Envoy pid %d (epoch %d) over to envoy-agent %s", s.proxy.Pid(), s.proxy.Epoch(), to))
	s.up.mu.Lock()
	bin, check := s.up.binary, s.up.check
	s.up.binary = nil
	s.up.mu.Unlock()
	err := s.execHandover(to, bin, check)
	bin.Close()
	s.up.mu.Lock()
	s.up.running = false
	s.up.lastErr = err.Error()
	s.up.mu.Unlock()
	s.log.Errorf("upgrade to envoy-agent %s failed, envoy-agent %s keeps serving: %v", to, s.version, err)
	s.notify.Ready(fmt.Sprintf("%s; upgrade failed: %s", s.liveStatus(), firstLine(err.Error())))
}

// probeBinary runs `EXE version --handover` (exe is the new binary's file,
// named binary in messages) and returns the binary's version when it reads
// this agent's handover format. The probe runs in a process group of its
// own, killed whole at ctx's end and once it has answered, so a probe that
// hangs, or leaves a child holding its output, is refused within
// control.UpgradeCheckTimeout (it once took 100 s, until the child exited).
func probeBinary(ctx context.Context, binary, exe string) (version string, check bool, err error) {
	text, err := runProbe(ctx, exe, "version", "--handover")
	if ctx.Err() != nil {
		return "", false, fmt.Errorf("the new %s does not run: `version --handover` did not answer within %s", binary, control.UpgradeCheckTimeout)
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == ExitUsage && strings.Contains(text, "-handover") {
			return "", false, fmt.Errorf("%w: the new %s predates live upgrades (no version --handover)", errCannotHandOver, binary)
		}
		return "", false, fmt.Errorf("the new %s does not run: `version --handover`: %w: %s", binary, err, truncateText(text, 200))
	}
	version, versions, err := parseHandoverVersions(text)
	if err != nil {
		return "", false, fmt.Errorf("the new %s: `version --handover`: %w", binary, err)
	}
	if !slices.Contains(versions, handoverVersion) {
		return "", false, fmt.Errorf("%w: the new %s (envoy-agent %s) reads handover versions %v, this agent writes %d", errCannotHandOver, binary, version, versions, handoverVersion)
	}
	return version, strings.Contains(text, "\n"+handoverCheckLine), nil
}

// checkBinary runs `EXE version --handover-check STATE`: the new binary
// reads the state it is about to be handed, as it will after the exec.
func checkBinary(ctx context.Context, binary, exe, state string) error {
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

// ExitUsage is envoy-agent's exit status for a command-line error (an
// unknown flag): cmd/envoy-agent exits with it, and so an agent older than
// the handover answers --handover.
const ExitUsage = 2

// HandoverVersionText is what `envoy-agent version --handover` prints.
func HandoverVersionText(version string) string {
	vs := make([]string, len(handoverVersions))
	for i, v := range handoverVersions {
		vs[i] = strconv.Itoa(v)
	}
	return fmt.Sprintf("envoy-agent %s\nhandover %s\n%s\n", version, strings.Join(vs, " "), handoverCheckLine)
}

// handoverCheckLine in `version --handover` says the binary answers
// `version --handover-check STATE` (older agents ignore the line).
const handoverCheckLine = "check --handover-check"

// parseHandoverVersions reads HandoverVersionText's output.
func parseHandoverVersions(text string) (version string, versions []int, err error) {
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
