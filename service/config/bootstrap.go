//go:build linux

package config

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
	"github.com/envoy-agent/envoy-agent/internal/hostfiles"
	"github.com/envoy-agent/envoy-agent/internal/safefile"
)

// bootstrapAdmin is the admin address of an Envoy bootstrap: a TCP socket
// address, or a unix socket (pipe).
type bootstrapAdmin struct {
	Address string
	Port    int
	Pipe    string // admin.address.pipe.path, when the admin is on a unix socket
	Mode    int    // admin.address.pipe.mode (0: Envoy leaves the umask's)
}

// readBootstrapAdmin reads admin.address from an Envoy bootstrap (YAML or
// JSON), decoded. ok is false when the bootstrap has none (or one the agent
// cannot read).
func readBootstrapAdmin(doc *yaml.Node) (admin bootstrapAdmin, ok bool) {
	var b struct {
		Admin struct {
			Address struct {
				SocketAddress struct {
					Address   string `yaml:"address"`
					PortValue any    `yaml:"port_value"`
				} `yaml:"socket_address"`
				Pipe struct {
					Path string `yaml:"path"`
					Mode any    `yaml:"mode"`
				} `yaml:"pipe"`
			} `yaml:"address"`
		} `yaml:"admin"`
	}
	if doc.Decode(&b) != nil {
		return bootstrapAdmin{}, false
	}
	if pipe := b.Admin.Address.Pipe; pipe.Path != "" {
		mode, ok := yamlInt(pipe.Mode)
		if !ok {
			return bootstrapAdmin{}, false
		}
		return bootstrapAdmin{Pipe: pipe.Path, Mode: mode}, true
	}
	sa := b.Admin.Address.SocketAddress
	if sa.Address == "" && sa.PortValue == nil {
		return bootstrapAdmin{}, false
	}
	port, ok := yamlInt(sa.PortValue)
	if !ok {
		return bootstrapAdmin{}, false
	}
	return bootstrapAdmin{Address: sa.Address, Port: port}, true
}

// yamlInt reads an integer field as Envoy would: a number, or a string
// holding one (proto3 JSON); absent is 0.
func yamlInt(v any) (int, bool) {
	switch v := v.(type) {
	case nil:
		return 0, true
	case int:
		return v, true
	case string:
		n, err := strconv.ParseInt(v, 0, 64)
		return int(n), err == nil
	default:
		return 0, false
	}
}

// decodeBootstrap reads and decodes the bootstrap once, for every check
// of it: its admin (checkBootstrapAdmin), the files it names
// (checkWriters), what Envoy and the agent will watch (inotifyNeed) and
// what the agent's copy of it changes (checkRunningCopy). A file that does
// not parse (a .pb one among them) is left to Envoy's own validation,
// which words it better (nil); one too large to parse in bounded memory
// (bootyaml.Decode) is a problem.
func (c *Config) decodeBootstrap(ps *problems) *yaml.Node {
	doc, data := c.readBootstrap(ps)
	if doc != nil && c.keepStart {
		c.start = bootyaml.NewDecoded(data, bootyaml.Clone(doc)) // the checks change doc
	}
	return doc
}

// readBootstrap is decodeBootstrap's read: the tree, and the bytes it was
// decoded from.
func (c *Config) readBootstrap(ps *problems) (*yaml.Node, []byte) {
	data, err := safefile.ReadRegular(c.Envoy.ConfigPath, bootyaml.MaxSize)
	if err != nil {
		// checkReadable has passed: what is left is its size.
		ps.add("envoy.config_path", "Envoy bootstrap %v", err)
		return nil, nil
	}
	var doc yaml.Node
	if err := bootyaml.Decode(data, &doc); err != nil {
		if le := (*bootyaml.LimitError)(nil); errors.As(err, &le) {
			ps.add("envoy.config_path", "Envoy bootstrap %v", fmt.Errorf("%s: %w", c.Envoy.ConfigPath, le))
		}
		return nil, nil
	}
	return &doc, data
}

// checkBootstrap runs the checks of the decoded bootstrap doc, those that
// change it last, in the order the agent's copy changes it: the admin is
// read, the certificates become secrets (counted by inotifyNeed), then the
// copy's admin and node are set (checkRunningCopy).
func (c *Config) checkBootstrap(ps *problems, doc *yaml.Node) {
	admin := c.Envoy.AdminPort != 0 || c.Envoy.AdminSocket != ""
	if admin {
		c.checkBootstrapAdmin(ps, doc)
	}
	rewritable := bootyaml.Rewritable(c.Envoy.ConfigPath)
	c.inotify = c.inotifyNeed(doc, rewritable)
	if admin && rewritable {
		c.checkRunningCopy(ps, doc)
	}
}

// checkBootstrapAdmin adds a problem when the bootstrap's admin listener is
// a unix socket other than admin_socket, or is not where admin_port says,
// or is a TCP one beyond loopback (without allow_remote_admin). A
// bootstrap without an admin, or with one on TCP while the agent's is a
// socket, runs with the agent's (checkRunningCopy says so).
func (c *Config) checkBootstrapAdmin(ps *problems, doc *yaml.Node) {
	admin, ok := readBootstrapAdmin(doc)
	if !ok {
		return
	}
	e := c.Envoy
	if admin.Pipe != "" {
		// Envoy binds a relative path in its working folder, which is the
		// agent's.
		path, _ := filepath.Abs(admin.Pipe)
		switch {
		case c.adminSocketDefault && path != e.AdminSocket:
			c.defaultAdminMismatch(ps, path)
		case e.AdminSocket == "":
			ps.add("envoy.admin_port", "is %d, but the bootstrap %s puts Envoy's admin on the unix socket %s: set admin_socket = %q instead",
				e.AdminPort, e.ConfigPath, admin.Pipe, path)
		case path != e.AdminSocket:
			ps.add("envoy.admin_socket", "is %s, but the bootstrap %s puts Envoy's admin on the unix socket %s: they must agree",
				e.AdminSocket, e.ConfigPath, path)
		}
		if admin.Mode&0o007 != 0 {
			ps.add("envoy.admin_socket", "the bootstrap %s gives Envoy's admin socket mode %04o: other users could connect to it and stop Envoy or read its configuration; use mode: 0600",
				e.ConfigPath, admin.Mode)
		}
		return
	}
	if e.AdminSocket != "" {
		return // the copy's admin is the socket (checkRunningCopy)
	}
	if admin.Port != int(e.AdminPort) {
		ps.add("envoy.admin_port", "is %d, but the bootstrap %s puts Envoy's admin listener on port %d: they must agree",
			e.AdminPort, e.ConfigPath, admin.Port)
	}
	if ip, err := netip.ParseAddr(admin.Address); !e.AllowRemoteAdmin && (err != nil || !ip.IsLoopback()) {
		ps.add("envoy.allow_remote_admin", "the bootstrap %s binds Envoy's admin listener to %q, reachable beyond this host: %s",
			e.ConfigPath, admin.Address, "use 127.0.0.1, or set allow_remote_admin = true to accept it")
	}
}

// maxSocketPath is the longest unix socket path Linux takes (sun_path is
// 108 bytes with its terminating NUL).
const maxSocketPath = 107

// checkAdminSocket checks admin_socket on its own: it replaces admin_port,
// so the two are not both set.
func (c *Config) checkAdminSocket(ps *problems) {
	if c.adminPortSet {
		ps.add("envoy.admin_port", "is set, and so is admin_socket: Envoy's admin is on one or the other; remove admin_port")
	}
	if len(c.Envoy.AdminSocket) > maxSocketPath {
		ps.add("envoy.admin_socket", "%s is %d bytes; a unix socket path has at most %d", c.Envoy.AdminSocket, len(c.Envoy.AdminSocket), maxSocketPath)
	}
	// In run_dir it is judged with run_dir.
	if dir := filepath.Dir(c.Envoy.AdminSocket); dir != filepath.Clean(c.RunDir()) {
		if err := hostfiles.CheckNewRunDir(dir, judgeFolderOwners()); err != nil {
			ps.add("envoy.admin_socket", "its folder: %v; "+adminFolderRisk, err)
		}
	}
	c.Envoy.AdminPort = 0
}

// adminFolderRisk is what a user who can write in the admin socket's folder
// can do.
const adminFolderRisk = "whoever else can write there can bind the socket before Envoy and answer the agent as Envoy's admin (a fake LIVE Envoy; the agent's drains and stops go to them): put it in run_dir (remove admin_socket), or in a folder only root and the agent's user can write"

// AdminAddress names where Envoy's admin API is, for the log and STATUS=.
func (c *Config) AdminAddress() string {
	if c.Envoy.AdminSocket != "" {
		return "unix:" + c.Envoy.AdminSocket
	}
	return fmt.Sprintf("%s:%d", c.Agent.Localhost, c.Envoy.AdminPort)
}
