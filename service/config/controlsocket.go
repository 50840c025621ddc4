//go:build linux

package config

import (
	"path/filepath"

	"github.com/envoy-agent/envoy-agent/internal/hostfiles"
)

// DefaultRunDir is agent.run_dir when the file does not set it: the
// folder the packaged unit's RuntimeDirectory=envoy-agent creates. A fixed
// default (not $RUNTIME_DIRECTORY) lets `envoy-agent reload` find the
// control socket from the configuration file alone, in any shell.
const DefaultRunDir = "/run/envoy-agent"

// controlSocketName is the control socket's name in run_dir when
// agent.control_socket is not set.
const controlSocketName = "control.sock"

// maxUnixPath is the longest path a unix socket address holds (sun_path is
// 108 bytes with its terminating NUL).
const maxUnixPath = 107

// ControlSocketPath is the path of the agent's control socket:
// agent.control_socket, else <run_dir>/control.sock.
func (c *Config) ControlSocketPath() string {
	if c.Agent.ControlSocket != "" {
		return c.Agent.ControlSocket
	}
	return filepath.Join(c.RunDir(), controlSocketName)
}

// checkControlSocket checks the control socket's path and folder; runDirOK
// false: run_dir was refused already, and a socket in it is not refused
// twice for the same reason.
func (c *Config) checkControlSocket(ps *problems, runDirOK bool) {
	key := "agent.control_socket"
	if c.Agent.ControlSocket == "" {
		key = "agent.run_dir"
		if hostfiles.CheckHotRestartSocketPath(c.RunDir(), c.Envoy.BaseID) != nil {
			return // run_dir is too long already for Envoy's longer socket names: said once
		}
	}
	if !runDirOK && filepath.Dir(c.ControlSocketPath()) == filepath.Clean(c.RunDir()) {
		return
	}
	if p := c.ControlSocketPath(); len(p) > maxUnixPath {
		ps.add(key, "the control socket %s is %d bytes long; a unix socket path holds at most %d", p, len(p), maxUnixPath)
	}
	c.checkControlSocketDir(ps)
}
