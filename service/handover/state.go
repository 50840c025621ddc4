//go:build linux

package handover

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy/certs"
	"github.com/envoy-agent/envoy-agent/envoy/reexec"
	"github.com/envoy-agent/envoy-agent/internal/safefile"
	"github.com/envoy-agent/envoy-agent/service/claims"
	"github.com/envoy-agent/envoy-agent/service/config"
)

// stateEnv names the state file a re-executed agent adopts.
const stateEnv = "ENVOY_AGENT_HANDOVER"

// formatVersion is the state file format this agent writes; it reads
// every version in formatVersions. A new format gets a new number, and
// agents keep reading the old ones for a while. Version 2 adds Envoy's
// hot-restart socket path (version 1's Envoys use the abstract sockets) and
// the claims' lock files; version 3 the ADS server's listening socket and
// the certificates it serves (the Envoys of versions 1 and 2 read their
// routes and secrets from files).
const formatVersion = 3

var formatVersions = []int{1, 2, 3}

// State is the state file: what the new agent needs to go on exactly where
// the old one was. Its JSON is read by agents other than the one that wrote
// it: fields and tags are never renamed.
type State struct {
	Version           int                  `json:"version"`             // the format (formatVersion when this agent wrote it)
	FromAgentVersion  string               `json:"from_agent_version"`  // the version of the agent that handed over
	Written           time.Time            `json:"written"`             // when it was written
	Config            *config.Config       `json:"config"`              // the settings that were serving (the file may have been edited since)
	HotRestartVersion string               `json:"hot_restart_version"` // the running Envoys' --hot-restart-version
	StatusFD          int                  `json:"status_fd"`           // the status server's listening socket
	PrometheusFD      int                  `json:"prometheus_fd"`       // the metrics listener's, -1 when off
	Claims            []claims.FD          `json:"claims"`              // the locked claim files (version 2)
	Envoy             reexec.HandoverState `json:"envoy"`               // the running Envoys, as package envoy handed them over
	// XDSFD is the ADS server's listening socket, -1 when none (version 3).
	XDSFD int `json:"xds_fd,omitempty"`
	// Certificates are the certificates' secrets the ADS server serves,
	// with their files (version 3).
	Certificates []certs.Served `json:"certificates,omitempty"`
}

// New is the state an agent of version from hands over, in the format this
// agent writes: the configuration serving, Envoy's hot-restart version and
// Envoy's own state. It holds no listener (KeepListeners adds them) and no
// claim file yet.
func New(from string, cfg *config.Config, hotRestartVersion string, envoy reexec.HandoverState) *State {
	return &State{Version: formatVersion, FromAgentVersion: from, Written: time.Now(),
		Config: cfg, HotRestartVersion: hotRestartVersion, StatusFD: -1, PrometheusFD: -1, XDSFD: -1, Envoy: envoy}
}

// Write writes st into dir, private (0600) and created exclusively, and
// returns its path. (No O_SYNC: the file is read in this same process after
// its exec, and by the new binary before it, from the page cache; after a
// crash of the machine nothing reads it.)
func Write(dir string, st *State) (string, error) {
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

// Take reads and removes the state file a previous agent in this process
// handed over, if any ($ENVOY_AGENT_HANDOVER), and unsets the variable so
// that no child sees it. Without a handover it returns nil, nil.
func Take() (*State, error) {
	path := os.Getenv(stateEnv)
	if path == "" {
		return nil, nil
	}
	_ = os.Unsetenv(stateEnv)
	defer os.Remove(path)
	return read(path)
}

// CheckState is `envoy-agent version --handover-check FILE`: the new
// binary of a live upgrade reads the state file the running agent wrote, as
// it will after the exec, and says on out whether it can adopt it; the
// running agent runs this before the exec (CheckBinary).
func CheckState(path string, out io.Writer) error {
	st, err := read(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "handover check ok: %d Envoy epochs, configuration %s\n", len(st.Envoy.Epochs), st.Config.File)
	return nil
}

// read reads and checks a state file.
func read(path string) (*State, error) {
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
	if !slices.Contains(formatVersions, head.Version) {
		return nil, fmt.Errorf("handover state %s: version %d, this agent reads %v", path, head.Version, formatVersions)
	}
	var st State
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

// ClaimFiles are the claim files handed over: none without a handover (st
// nil) or from version 1, whose claims were abstract sockets that the exec
// closed.
func (st *State) ClaimFiles() []claims.FD {
	if st == nil {
		return nil
	}
	return st.Claims
}

// ServingConfig is the configuration handed over, nil without a handover
// (st nil).
func (st *State) ServingConfig() *config.Config {
	if st == nil {
		return nil
	}
	return st.Config
}

// HasXDS reports whether the state hands over an ADS server (version 3):
// its socket (AdoptXDS) and the certificates it served. An agent of before
// ran its Envoys from files.
func (st *State) HasXDS() bool { return st != nil && st.Version >= 3 && st.XDSFD >= 0 }

// AdoptXDS takes over the ADS server's listening socket inherited through
// the exec.
func (st *State) AdoptXDS() (*net.UnixListener, error) {
	f := os.NewFile(uintptr(st.XDSFD), "xds")
	if f == nil {
		return nil, fmt.Errorf("the ADS server's socket: bad inherited fd %d", st.XDSFD)
	}
	defer f.Close() // FileListener made its own copy
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("the ADS server's socket: inherited fd %d: %w", st.XDSFD, err)
	}
	ul, ok := ln.(*net.UnixListener)
	if !ok {
		ln.Close()
		return nil, fmt.Errorf("the ADS server's socket: inherited fd %d is not a unix socket", st.XDSFD)
	}
	return ul, nil
}

// KeepXDS keeps the ADS server's listening socket open across the exec
// (Envoy, reconnecting, finds it listening and waits in its backlog until
// the new agent serves it) and records its fd in st. undo, never nil, makes
// it close-on-exec again.
func (st *State) KeepXDS(ln *net.UnixListener) (undo func(), err error) {
	if ln == nil {
		return func() {}, nil
	}
	fd, err := reexec.Inheritable(ln, true)
	undo = func() { _, _ = reexec.Inheritable(ln, false) }
	if err != nil {
		return undo, fmt.Errorf("keep the ADS server's socket open across the exec: %w", err)
	}
	st.XDSFD = fd
	return undo, nil
}

// AdoptListeners takes over the status and metrics listeners inherited
// through the exec (promLn is nil when the metrics port was off).
func (st *State) AdoptListeners() (statusLn, promLn net.Listener, err error) {
	if statusLn, err = adoptListener(st.StatusFD, "agent.status_port"); err != nil {
		return nil, nil, err
	}
	if st.PrometheusFD >= 0 {
		if promLn, err = adoptListener(st.PrometheusFD, "agent.prometheus_port"); err != nil {
			statusLn.Close()
			return nil, nil, err
		}
	}
	return statusLn, promLn, nil
}

// adoptListener is a listening socket inherited through the exec.
func adoptListener(fd int, what string) (net.Listener, error) {
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

// KeepListeners keeps the status and metrics listeners (either may be nil)
// open across the exec and records their fds in st. undo, never nil, makes
// the listeners it kept close-on-exec again: the caller calls it when the
// exec failed, or at once when err is set.
func (st *State) KeepListeners(statusLn, promLn net.Listener) (undo func(), err error) {
	var kept []net.Listener
	undo = func() {
		for _, ln := range kept {
			_, _ = reexec.Inheritable(ln.(*net.TCPListener), false)
		}
	}
	for _, l := range []struct {
		ln net.Listener
		fd *int
	}{{statusLn, &st.StatusFD}, {promLn, &st.PrometheusFD}} {
		if l.ln == nil {
			continue
		}
		tl, ok := l.ln.(*net.TCPListener)
		if !ok {
			return undo, fmt.Errorf("listener %s is not TCP", l.ln.Addr())
		}
		fd, err := reexec.Inheritable(tl, true)
		if err != nil {
			return undo, fmt.Errorf("keep listener %s open across the exec: %w", l.ln.Addr(), err)
		}
		kept = append(kept, l.ln)
		*l.fd = fd
	}
	return undo, nil
}
