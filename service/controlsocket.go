//go:build linux

package service

import (
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/envoy-agent/envoy-agent/internal/hostfiles"
	"github.com/envoy-agent/envoy-agent/service/control"
)

// controlMaxConns: operators' commands, one at a time as a rule.
const controlMaxConns = 16

// newControl binds the control socket of the running configuration; the
// caller sets quit.
func (s *supervisor) newControl() (*control.Server, *net.UnixListener, error) {
	cfg := s.config()
	path := cfg.ControlSocketPath()
	key := "agent.control_socket"
	if cfg.Agent.ControlSocket == "" {
		key = "agent.run_dir"
	}
	abs, err := filepath.Abs(cfg.File)
	if err != nil {
		return nil, nil, fmt.Errorf("the configuration's path: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, nil, fmt.Errorf("%s: the control socket's folder: %w", key, err)
	}
	// As run_dir: only the agent's user or root may own the folder.
	if err := hostfiles.CheckRunDir(filepath.Dir(path)); err != nil {
		return nil, nil, fmt.Errorf("%s: the control socket's folder: %w", key, err)
	}
	ln, err := control.Listen(path)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: the control socket: %w", key, err)
	}
	c := &control.Server{Log: s.log, Policy: control.OwnPolicy(), ConfigPath: abs, Drain: s.drainNow, Reload: s.requestReload, Plan: s.requestPlan}
	return c, ln, nil
}
