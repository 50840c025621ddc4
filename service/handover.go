//go:build linux

package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envoy-agent/envoy-agent/envoy"
	"github.com/envoy-agent/envoy-agent/envoy/reexec"
	"github.com/envoy-agent/envoy-agent/internal/safefile"
	"github.com/envoy-agent/envoy-agent/service/claims"
	"github.com/envoy-agent/envoy-agent/service/config"
	"github.com/envoy-agent/envoy-agent/service/control"
)

// A live upgrade of the agent: the old agent re-executes the new binary in
// its own process (execve keeps the PID, so systemd's MAINPID and
// NotifyAccess=main stay right, and the Envoys stay its children), handing
// over a versioned state file named by handoverEnv. See upgrade.go for the
// trigger and README.md "Upgrading envoy-agent".

// handoverEnv names the state file a re-executed agent adopts.
const handoverEnv = "ENVOY_AGENT_HANDOVER"

// execFDEnv names the fd of the binary a live upgrade executed, left open
// across the exec; the new agent closes it (closeExecFD).
const execFDEnv = "ENVOY_AGENT_EXEC_FD"

// closeExecFD closes the fd execFDEnv names, so that Envoys forked later do
// not inherit it, and gives the process back its command name.
func closeExecFD() {
	if v := os.Getenv(execFDEnv); v != "" {
		if fd, err := strconv.Atoi(v); err == nil && fd > 2 {
			_ = unix.Close(fd)
		}
		_ = os.Unsetenv(execFDEnv)
		restoreComm()
	}
}

// commMax is the longest command name the kernel keeps (TASK_COMM_LEN 16,
// less the terminating NUL).
const commMax = 15

// restoreComm sets the process's command name (/proc/PID/comm, what
// `pgrep -x` and `ps -C` match) back to its argv[0]'s base name. The kernel
// names a process after the base name of the path it was executed by, and a
// live upgrade executes /proc/self/fd/N: without this the agent's name
// becomes "N" and `pgrep -x envoy-agent` no longer finds it. Writing
// /proc/self/comm names the main thread (the process), whichever thread
// writes.
func restoreComm() {
	if len(os.Args) == 0 || os.Args[0] == "" {
		return
	}
	name := filepath.Base(os.Args[0])
	if len(name) > commMax {
		name = name[:commMax]
	}
	_ = os.WriteFile("/proc/self/comm", []byte(name), 0)
}

// handoverVersion is the state file format this agent writes; it reads
// every version in handoverVersions. A new format gets a new number, and
// agents keep reading the old ones for a while. Version 2 adds Envoy's
// hot-restart socket path (version 1's Envoys use the abstract sockets) and
// the claims' lock files.
const handoverVersion = 2

var handoverVersions = []int{1, 2}

// handoverState is the state file: what the new agent needs to go on
// exactly where the old one was.
type handoverState struct {
	Version           int                  `json:"version"`
	FromAgentVersion  string               `json:"from_agent_version"`
	Written           time.Time            `json:"written"`
	Config            *config.Config       `json:"config"` // the settings that were serving (the file may have been edited since)
	HotRestartVersion string               `json:"hot_restart_version"`
	StatusFD          int                  `json:"status_fd"`     // the status server's listening socket
	PrometheusFD      int                  `json:"prometheus_fd"` // the metrics listener's, -1 when off
	Claims            []claims.FD          `json:"claims"`        // the locked claim files (version 2)
	Envoy             reexec.HandoverState `json:"envoy"`
}

// writeHandoverState writes st into dir, private (0600) and created
// exclusively, and returns its path. (No O_SYNC: the file is read in this
// same process after its exec, and by the new binary before it, from the
// page cache; after a crash of the machine nothing reads it.)
func writeHandoverState(dir string, st *handoverState) (string, error) {
	data, err := json.Marshal(st)
	if err != nil {
		return "", fmt.Errorf("handover state: %w", err)
	}
	path := filepath.Join(dir, fmt.Sprintf("handover-%d.json", time.Now().UnixNano()))
	if err := safefile.CreatePrivate(path, data); err != nil {
		return "", fmt.Errorf("handover state: %w", err)
	}
	return path, nil
}

// takeHandover reads and removes the state file a previous agent in this
// process handed over, if any ($ENVOY_AGENT_HANDOVER), and unsets the
// variable so that no child sees it.
func takeHandover() (*handoverState, error) {
	path := os.Getenv(handoverEnv)
	if path == "" {
		return nil, nil
	}
	_ = os.Unsetenv(handoverEnv)
	defer os.Remove(path)
	return readHandover(path)
}

// CheckHandover is `envoy-agent version --handover-check FILE`: the new
// binary of a live upgrade reads the state file the running agent wrote, as
// it will after the exec, and says whether it can adopt it; the running
// agent runs this before the exec (upgrade.go).
func CheckHandover(path string, out io.Writer) error {
	st, err := readHandover(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "handover check ok: %d Envoy epochs, configuration %s\n", len(st.Envoy.Epochs), st.Config.File)
	return nil
}

// readHandover reads and checks a state file.
func readHandover(path string) (*handoverState, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("handover state %s: %w", path, err)
	}
	var head struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("handover state %s: %w", path, err)
	}
	if !knownHandoverVersion(head.Version) {
		return nil, fmt.Errorf("handover state %s: version %d, this agent reads %v", path, head.Version, handoverVersions)
	}
	var st handoverState
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return nil, fmt.Errorf("handover state %s: %w", path, err)
	}
	if st.Config == nil || len(st.Envoy.Epochs) == 0 {
		return nil, fmt.Errorf("handover state %s: no configuration or no Envoy in it", path)
	}
	return &st, nil
}

// claims are the claim files handed over (none from version 1, whose
// claims were abstract sockets that the exec closed).
func (st *handoverState) claims() []claims.FD {
	if st == nil {
		return nil
	}
	return st.Claims
}

// config is the configuration handed over, nil without a handover.
func (st *handoverState) config() *config.Config {
	if st == nil {
		return nil
	}
	return st.Config
}

func knownHandoverVersion(v int) bool {
	for _, k := range handoverVersions {
		if k == v {
			return true
		}
	}
	return false
}

// adoptedListener is a listening socket inherited through the exec.
func adoptedListener(fd int, what string) (net.Listener, error) {
	f := os.NewFile(uintptr(fd), what)
	if f == nil {
		return nil, fmt.Errorf("%s: bad inherited fd %d", what, fd)
	}
	defer f.Close() // FileListener made its own copy
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("%s: inherited fd %d: %w", what, fd, err)
	}
	return ln, nil
}

// listen binds the status and metrics listeners, or takes them over from
// the agent that handed over (no moment without them).
func (s *supervisor) listen(cfg *config.Config) (statusLn, promLn net.Listener, err error) {
	if st := s.handover; st != nil {
		if statusLn, err = adoptedListener(st.StatusFD, "agent.status_port"); err != nil {
			return nil, nil, err
		}
		if st.PrometheusFD >= 0 {
			if promLn, err = adoptedListener(st.PrometheusFD, "agent.prometheus_port"); err != nil {
				statusLn.Close()
				return nil, nil, err
			}
		}
		return statusLn, promLn, nil
	}
	return bindPorts(cfg)
}

// newProxy is the Envoy this agent supervises: a new one, or the one the
// agent that handed over was running.
func (s *supervisor) newProxy(cfg *config.Config) (*envoy.Envoy, error) {
	if st := s.handover; st != nil {
		s.setHotRestartVersion(st.HotRestartVersion) // before proxyConfig, which reads it
		return envoy.AdoptEnvoy(s.proxyConfig(cfg), st.Envoy)
	}
	return envoy.NewEnvoy(s.proxyConfig(cfg)), nil
}

// adoptedNote is what READY's STATUS= adds after a handover.
func (s *supervisor) adoptedNote() string {
	if st := s.handover; st != nil {
		return fmt.Sprintf("; adopted epoch %d from envoy-agent %s", s.proxy.Epoch(), st.FromAgentVersion)
	}
	return ""
}

// execHandover re-executes the agent's binary with the running Envoys and
// listeners kept. It returns only when that failed; then everything is as
// before and the caller reports why.
func (s *supervisor) execHandover(to string, bin *os.File, check bool) error {
	cfg := s.config()
	return s.proxy.Handover(func(es reexec.HandoverState) error {
		if s.agent.Draining() {
			// A stop came in meanwhile: it wins, and the drain goes on here.
			return errors.New("a stop began: not handing over a draining Envoy")
		}
		st := &handoverState{Version: handoverVersion, FromAgentVersion: s.version, Written: time.Now(),
			Config: cfg, HotRestartVersion: s.hotRestartVersion(), StatusFD: -1, PrometheusFD: -1, Envoy: es}
		var kept []net.Listener
		defer func() {
			for _, ln := range kept {
				_, _ = reexec.Inheritable(ln.(*net.TCPListener), false)
			}
		}()
		for _, l := range []struct {
			ln net.Listener
			fd *int
		}{{s.statusLn, &st.StatusFD}, {s.promLn, &st.PrometheusFD}} {
			if l.ln == nil {
				continue
			}
			tl, ok := l.ln.(*net.TCPListener)
			if !ok {
				return fmt.Errorf("listener %s is not TCP", l.ln.Addr())
			}
			fd, err := reexec.Inheritable(tl, true)
			if err != nil {
				return fmt.Errorf("keep listener %s open across the exec: %w", l.ln.Addr(), err)
			}
			kept = append(kept, l.ln)
			*l.fd = fd
		}
		handed, undo, err := s.held.HandOver()
		if err != nil {
			return err
		}
		defer undo() // only reached when the exec failed
		st.Claims = handed
		path, err := writeHandoverState(es.RunDir, st)
		if err != nil {
			return err
		}
		env := []string{handoverEnv + "=" + path}
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, handoverEnv+"=") && !strings.HasPrefix(kv, execFDEnv+"=") {
				env = append(env, kv)
			}
		}
		// The new binary reads this very state before the exec, when it
		// says it can (a binary that passes the probe but cannot run on is
		// refused here, with Envoy still ours).
		if check {
			ctx, cancel := context.WithTimeout(context.Background(), control.UpgradeCheckTimeout)
			err := checkBinary(ctx, s.selfPath, fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), bin.Fd()), path)
			cancel()
			if err != nil {
				_ = os.Remove(path)
				return err
			}
		}
		// The fd probed is the file run. It stays open across the exec (a
		// script's interpreter reads it by /proc/self/fd/N); the new agent
		// closes it (execFDEnv).
		fd := int(bin.Fd())
		if err := unix.SetNonblock(fd, false); err != nil {
			return fmt.Errorf("the new binary's fd: %w", err)
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
			return fmt.Errorf("the new binary's fd: %w", err)
		}
		defer func() { _, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC) }()
		env = append(env, execFDEnv+"="+strconv.Itoa(fd))
		s.log.Infof("upgrade: handing Envoy pid %d (epoch %d) over to envoy-agent %s: exec %s (the file probed, fd %d)", s.proxy.Pid(), s.proxy.Epoch(), to, s.selfPath, fd)
		err = reexec.ExecOnForkerThread(fmt.Sprintf("/proc/self/fd/%d", fd), os.Args, env)
		_ = os.Remove(path)
		return err
	})
}
