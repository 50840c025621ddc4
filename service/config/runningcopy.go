//go:build linux

package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/envoy-agent/envoy-agent/envoy/inplace"
	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
	"github.com/envoy-agent/envoy-agent/internal/safefile"
	"go.yaml.in/yaml/v3"
)

// What the agent changes in the copy of the bootstrap that Envoy runs
// (envoy/inplace's pipeline, steps 2 and 3), said once: run logs it at its
// start, validate prints it. The same functions make the copy, so what is
// said is what runs.

// agentAdmin is where the agent reaches Envoy's admin, which the running
// copy's admin must be.
func (c *Config) agentAdmin() inplace.AgentAdmin {
	if c.Envoy.AdminSocket != "" {
		return inplace.AgentAdmin{Socket: c.Envoy.AdminSocket}
	}
	return inplace.AgentAdmin{Host: c.Agent.Localhost, Port: int(c.Envoy.AdminPort)}
}

// checkRunningCopy says what the running copy of the decoded bootstrap doc
// changes (it makes those changes in doc): a warning when the bootstrap's
// TCP admin address is not used, a note when the copy gets an admin or a
// node. A cluster that cannot follow the admin to the agent's socket is a
// problem naming the edit to make.
func (c *Config) checkRunningCopy(ps *problems, doc *yaml.Node) {
	// After inotifyNeed, which turned the certificates into secrets as run's
	// copy does.
	edits, err := inplace.EditRunningCopy(doc, c.agentAdmin(), c.inotify.Secrets > 0)
	var ace *inplace.AdminClusterError
	switch {
	case errors.As(err, &ace):
		ps.add("envoy.admin_port", "is not set, so Envoy's admin API runs on the unix socket %s, which the bootstrap %s's cluster %s cannot reach (it resolves its other endpoints by DNS): set admin_port = %s to keep Envoy's admin on TCP (with the bootstrap's admin address on 127.0.0.1), or make that cluster STATIC",
			c.Envoy.AdminSocket, c.Envoy.ConfigPath, ace.Cluster, ace.Port)
		return
	case err != nil:
		ps.add("envoy.config_path", "Envoy bootstrap %v", fmt.Errorf("%s: %w", c.Envoy.ConfigPath, err))
		return
	}
	file := c.Envoy.ConfigPath
	if edits.AdminAdded {
		c.notef("%s: the bootstrap has no admin address; Envoy runs with its admin API on %s, the agent's, in the agent's copy only", file, c.AdminAddress())
	}
	if edits.AdminMoved != "" {
		clusters := ""
		if len(edits.AdminClusters) > 0 {
			clusters = fmt.Sprintf("; cluster %s, which reached that address, reaches the socket instead", strings.Join(edits.AdminClusters, ", "))
		}
		c.warnf("%s: envoy.admin_socket: the bootstrap puts Envoy's admin API on TCP %s, which is not used: Envoy runs it on the agent's private socket %s instead, in the agent's copy only (%s)%s; read Envoy's statistics from the agent's metrics port (agent.prometheus_port: Envoy's /stats/prometheus and the agent's own), or set admin_port to keep a TCP admin on loopback",
			file, edits.AdminMoved, c.Envoy.AdminSocket, "on TCP, "+tcpAdminRisk, clusters)
	}
	if len(edits.NodeSet) > 0 {
		c.notef("%s: the bootstrap sets no %s; Envoy runs with %q there, in the agent's copy only (Envoy reads resources from files only with a node id and cluster)", file, strings.Join(edits.NodeSet, " and "), inplace.DefaultNode)
	}
	switch {
	case edits.UserAgents > 0 && len(edits.NodeSet) > 0:
		c.warnf("%s: %d HTTP connection manager(s) set add_user_agent, so Envoy sends its node upstream (x-envoy-downstream-service-cluster and x-envoy-downstream-service-node: %q, where a bare Envoy of this bootstrap sends an empty cluster and no node): Envoy needs one to read the certificates the agent serves it; set node.id and node.cluster in the bootstrap to choose what it sends",
			file, edits.UserAgents, inplace.DefaultNode)
	case edits.UserAgents > 0:
		c.warnf("%s: the bootstrap sets no node.id and node.cluster, and %d HTTP connection manager(s) set add_user_agent, which sends them upstream (x-envoy-downstream-service-cluster and -node): the agent leaves them empty, as a bare Envoy runs it, so Envoy runs this bootstrap as it is and every reload hot-restarts; set node.id and node.cluster in the bootstrap to reload in place",
			file, edits.UserAgents)
	}
}

// RunningCopy is the copy of the bootstrap that Envoy runs, as far as it
// depends on the configuration alone (inplace.RunningCopy: the admin, the
// node; the certificates' secrets are written by run, and until then the
// copy names the files themselves), written to a private temporary file
// of the same name, and how to remove it. It is the bootstrap itself
// (and nothing to remove) when the copy changes nothing.
func (c *Config) RunningCopy() (path string, remove func(), err error) {
	data, err := safefile.ReadRegular(c.Envoy.ConfigPath, bootyaml.MaxSize)
	if err != nil {
		return "", nil, err
	}
	out, edits, err := inplace.RunningCopy(data, c.Envoy.ConfigPath, c.agentAdmin())
	if err != nil || edits.Empty() {
		return c.Envoy.ConfigPath, func() {}, err
	}
	dir, err := os.MkdirTemp("", "envoy-agent-validate-")
	if err != nil {
		return "", nil, err
	}
	path = filepath.Join(dir, filepath.Base(c.Envoy.ConfigPath))
	if err := safefile.CreatePrivate(path, out); err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	return path, func() { _ = os.RemoveAll(dir) }, nil
}

// ListenerNames says which listeners of the running copy at path (a copy
// RunningCopy made of the bootstrap) the agent names in the files it
// writes, with reload_method "auto", or why every reload of it is a hot
// restart; "" when neither.
func (c *Config) ListenerNames(path string) string {
	if !c.Agent.InPlace() {
		return ""
	}
	data, err := safefile.ReadRegular(path, bootyaml.MaxSize)
	if err != nil {
		return ""
	}
	b, err := inplace.Parse(c.Envoy.ConfigPath, data, nil)
	var nr *inplace.NotRewritableError
	switch {
	case errors.As(err, &nr):
		return fmt.Sprintf("%s: every reload hot-restarts Envoy: %s", c.Envoy.ConfigPath, nr.Reason)
	case err != nil || len(b.Named()) == 0:
		return ""
	}
	var named []string
	for _, n := range b.Named() {
		named = append(named, n.String())
	}
	return fmt.Sprintf("%s: listeners without a name run under these names in the agent's resource files (Envoy's statistics name a listener by its address, so they keep theirs): %s", c.Envoy.ConfigPath, strings.Join(named, ", "))
}

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
