//go:build linux

package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy/reexec"
	"github.com/envoy-agent/envoy-agent/service/config"
	"github.com/envoy-agent/envoy-agent/service/control"
	"github.com/envoy-agent/envoy-agent/service/handover"
)

// The old agent's side of a live upgrade: it re-executes the new binary in
// its own process and hands over a state file (package handover, which
// also probes the new binary); the new agent's side is at the end of this file; README.md
// "Upgrading envoy-agent".

// upgradeState guards the live upgrade: one at a time.
type upgradeState struct {
	mu      sync.Mutex
	running bool
	lastErr string // why the last upgrade was refused or failed
}

// preparedUpgrade is an upgrade whose new binary was probed and can take
// over (prepareUpgrade): what runUpgrade executes.
type preparedUpgrade struct {
	to string // the new agent's version
	// binary is the new agent's file, opened before it was probed.
	binary *os.File
	// check: the new binary can read the state before the exec
	// (version --handover-check).
	check bool
}

// imageStarted is when this program image started (a re-exec starts anew).
var imageStarted = time.Now().UnixNano()

// upgradeHandler is the /upgrade route, mountable on any router: GET says
// what runs; POST checks the agent's binary (as installed now) and, when it
// can take over, answers 202 and re-executes it with Envoy kept, and with
// o, the claims and sockets the run holds.
func (s *supervisor) upgradeHandler(o *opened) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.Method {
		case http.MethodGet:
			_ = json.NewEncoder(w).Encode(s.upgradeInfo())
		case http.MethodPost:
			ans, up := s.prepareUpgrade(r.Context())
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
			s.runUpgrade(up, o)
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
		Live: s.live(), LastUpgradeError: lastErr, ImageStarted: imageStarted}
	if s.handover != nil {
		a.AdoptedFrom = s.handover.FromAgentVersion
	}
	return a
}

// prepareUpgrade checks that a live upgrade can go ahead; with OK set, the
// caller must call runUpgrade with the prepared upgrade.
func (s *supervisor) prepareUpgrade(ctx context.Context) (control.UpgradeAnswer, preparedUpgrade) {
	ans := s.upgradeInfo()
	ans.OK, ans.LastUpgradeError = false, ""
	if !ans.Live {
		ans.Error = "envoy is not serving (starting or stopping): nothing to hand over"
		s.log.Warnf("upgrade refused: %s", ans.Error)
		return ans, preparedUpgrade{}
	}
	s.up.mu.Lock()
	if s.up.running {
		s.up.mu.Unlock()
		ans.Error = "an upgrade is under way"
		return ans, preparedUpgrade{}
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
		to, check, err = handover.ProbeBinary(ctx, s.selfPath, fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), bin.Fd()))
		if err != nil {
			bin.Close()
		}
	}
	if err == nil {
		s.up.mu.Lock()
		s.up.lastErr = "" // the client waits for this upgrade's outcome, not an earlier one's
		s.up.mu.Unlock()
		ans.OK, ans.To = true, to
		return ans, preparedUpgrade{to: to, binary: bin, check: check}
	}
	s.up.mu.Lock()
	s.up.running = false
	s.up.lastErr = err.Error()
	s.up.mu.Unlock()
	ans.Error = err.Error()
	if errors.Is(err, handover.ErrCannotHandOver) {
		ans.Fallback = true
		s.log.Warnf("upgrade: %v; falling back to a drained restart", err)
		return ans, preparedUpgrade{}
	}
	s.log.Errorf("upgrade refused, envoy-agent %s keeps serving: %v", s.version, err)
	s.notify.Status(fmt.Sprintf("%s; upgrade refused: %s", s.liveStatus(), firstLine(err.Error())))
	return ans, preparedUpgrade{}
}

// runUpgrade re-executes the agent's binary, up, handing over o; it
// returns only when that failed, with the old agent still in charge.
func (s *supervisor) runUpgrade(up preparedUpgrade, o *opened) {
	to := up.to
	s.notify.Reloading(fmt.Sprintf("upgrading: handing Envoy pid %d (epoch %d) over to envoy-agent %s", s.proxy.Pid(), s.proxy.Epoch(), to))
	s.stopGuard() // an upgrade is never rolled back, and the new agent watches no reload of this one's
	err := s.execHandover(up, o)
	up.binary.Close()
	s.up.mu.Lock()
	s.up.running = false
	s.up.lastErr = err.Error()
	s.up.mu.Unlock()
	s.log.Errorf("upgrade to envoy-agent %s failed, envoy-agent %s keeps serving: %v", to, s.version, err)
	s.notify.Ready(fmt.Sprintf("%s; upgrade failed: %s", s.liveStatus(), firstLine(err.Error())))
}

// execHandover re-executes the agent's binary with the running Envoys and
// o's listeners and claims kept. It returns only when that failed; then
// everything is as before and the caller reports why.
func (s *supervisor) execHandover(up preparedUpgrade, o *opened) error {
	to, bin, check := up.to, up.binary, up.check
	cfg := s.config()
	return s.proxy.Handover(func(es reexec.HandoverState) error {
		if s.stopping() {
			// A stop came in meanwhile: it wins, and the drain goes on here.
			return errors.New("a stop began: not handing over a draining Envoy")
		}
		st := handover.New(s.version, cfg, s.hotRestartVersion(), es)
		undoListeners, err := st.KeepListeners(o.statusLn, o.promLn)
		defer undoListeners() // only reached when the exec failed
		if err != nil {
			return err
		}
		undoXDS, err := st.KeepXDS(s.xds.Listener())
		defer undoXDS() // only reached when the exec failed
		if err != nil {
			return err
		}
		st.Certificates = s.certs.Served()
		handed, undo, err := o.held.HandOver()
		if err != nil {
			return err
		}
		defer undo() // only reached when the exec failed
		st.Claims = handed
		path, err := handover.Write(es.RunDir, st)
		if err != nil {
			return err
		}
		// The new binary reads this very state before the exec, when it
		// says it can (a binary that passes the probe but cannot run on is
		// refused here, with Envoy still ours).
		if check {
			ctx, cancel := context.WithTimeout(context.Background(), control.UpgradeCheckTimeout)
			err := handover.CheckBinary(ctx, s.selfPath, fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), bin.Fd()), path)
			cancel()
			if err != nil {
				_ = os.Remove(path)
				return err
			}
		}
		// The fd probed is the file run. It stays open across the exec (a
		// script's interpreter reads it by /proc/self/fd/N); the new agent
		// closes it (handover.CloseExecFD).
		fd, undoFD, err := handover.InheritBinary(bin)
		if err != nil {
			return err
		}
		defer undoFD()
		s.log.Infof("upgrade: handing Envoy pid %d (epoch %d) over to envoy-agent %s: exec %s (the file probed, fd %d)", s.proxy.Pid(), s.proxy.Epoch(), to, s.selfPath, fd)
		err = handover.Exec(fd, path)
		_ = os.Remove(path)
		return err
	})
}

// The new agent's side of a live upgrade: what it adopts from the agent
// that re-executed into it (s.handover, package handover). The old agent's
// side is upgrade.go; README.md "Upgrading envoy-agent".

// openPorts binds the status and metrics ports, or takes them over from
// the agent that handed over (no moment without them).
func (s *supervisor) openPorts(cfg *config.Config) (statusLn, promLn net.Listener, err error) {
	if st := s.handover; st != nil {
		return st.AdoptListeners()
	}
	return bindPorts(cfg)
}

// adoptedNote is what READY's STATUS= adds after a handover.
func (s *supervisor) adoptedNote() string {
	if st := s.handover; st != nil {
		return fmt.Sprintf("; adopted epoch %d from envoy-agent %s", s.proxy.Epoch(), st.FromAgentVersion)
	}
	return ""
}
