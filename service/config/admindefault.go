//go:build linux

package config

import (
	"path/filepath"
)

// Envoy's admin API can dump the configuration (the bootstrap's secrets
// included), change Envoy's log level (then secrets and clients' headers
// reach the journal), drain listeners, fail health checks and stop Envoy.
// On TCP, even on loopback, every local user reaches it; on a unix socket
// of mode 0600 in the run folder, only the agent's user does. So when the
// file says nothing (neither admin_port nor admin_socket), the admin is the
// unix socket <run_dir>/admin.sock, and a TCP admin is a choice the
// operator makes, warned about once. A bootstrap whose admin is on TCP
// runs with the socket instead (checkRunningCopy): its address is not used.

// adminSocketName is the admin socket's name in run_dir when neither
// envoy.admin_port nor envoy.admin_socket is set.
const adminSocketName = "admin.sock"

// DefaultAdminSocket is envoy.admin_socket when neither it nor admin_port
// is set: admin.sock in the run folder.
func (c *Config) DefaultAdminSocket() string {
	return filepath.Join(c.RunDir(), adminSocketName)
}

// defaultAdmin puts Envoy's admin on the default unix socket when the file
// sets neither admin_port nor admin_socket.
func (c *Config) defaultAdmin() {
	if c.adminPortSet || c.Envoy.AdminSocket != "" {
		return
	}
	c.Envoy.AdminSocket = c.DefaultAdminSocket()
	c.Envoy.AdminPort = 0
	c.adminSocketDefault = true
}

// tcpAdminRisk is what any local user can do with a TCP admin.
const tcpAdminRisk = "every local user can reach it: read /config_dump (the bootstrap's secrets included), POST /logging?level=trace (then those secrets and clients' Authorization headers reach the journal), POST /quitquitquit (Envoy stops and the agent exits), POST /drain_listeners and /healthcheck/fail"

// warnTCPAdmin warns, once, that the admin is on TCP.
func (c *Config) warnTCPAdmin() {
	if c.Envoy.AdminSocket != "" || c.Envoy.AdminPort == 0 {
		return
	}
	c.warnf("%s: envoy.admin_port: Envoy's admin API is on TCP %s:%d, and %s; put it on a unix socket instead: remove admin_port (Envoy then runs its admin on the agent's socket %s, whatever address the bootstrap %s gives it)",
		c.File, c.Agent.Localhost, c.Envoy.AdminPort, tcpAdminRisk, c.DefaultAdminSocket(), c.Envoy.ConfigPath)
}

// defaultAdminMismatch is the problem of a bootstrap whose admin is
// another unix socket than the default one, the file setting neither
// admin key.
func (c *Config) defaultAdminMismatch(ps *problems, socket string) {
	ps.add("envoy.admin_socket", "is not set (nor admin_port), so Envoy's admin API is on the unix socket %s, but the bootstrap %s puts it on the unix socket %s: set admin_socket = %q (or remove the bootstrap's admin: the agent then gives Envoy its own)",
		c.Envoy.AdminSocket, c.Envoy.ConfigPath, socket, socket)
}
