package service

import (
	"net/netip"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// maxBootstrapSize bounds the bootstrap the agent reads to check its admin
// address; Envoy itself reads it whole.
const maxBootstrapSize = 64 << 20

// bootstrapAdmin is the admin socket address of an Envoy bootstrap.
type bootstrapAdmin struct {
	Address string
	Port    int
}

// readBootstrapAdmin reads admin.address.socket_address from an Envoy
// bootstrap (YAML or JSON). ok is false when the bootstrap has none there
// (a pipe address, or no admin at all); a file that does not parse is left
// to Envoy's own validation, which words it better.
func readBootstrapAdmin(path string) (admin bootstrapAdmin, ok bool, err error) {
	data, err := readRegularFile(path, maxBootstrapSize)
	if err != nil {
		return bootstrapAdmin{}, false, err
	}
	var doc struct {
		Admin struct {
			Address struct {
				SocketAddress struct {
					Address   string `yaml:"address"`
					PortValue any    `yaml:"port_value"`
				} `yaml:"socket_address"`
			} `yaml:"address"`
		} `yaml:"admin"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return bootstrapAdmin{}, false, nil
	}
	sa := doc.Admin.Address.SocketAddress
	if sa.Address == "" && sa.PortValue == nil {
		return bootstrapAdmin{}, false, nil
	}
	var port int
	switch v := sa.PortValue.(type) {
	case int:
		port = v
	case string:
		port, err = strconv.Atoi(v)
		if err != nil {
			return bootstrapAdmin{}, false, nil
		}
	case nil:
		port = 0
	default:
		return bootstrapAdmin{}, false, nil
	}
	return bootstrapAdmin{Address: sa.Address, Port: port}, true, nil
}

// checkBootstrapAdmin adds a problem when the bootstrap's admin listener is
// not on admin_port or not on loopback (without allow_remote_admin).
func (c *Config) checkBootstrapAdmin(ps *problems) {
	admin, ok, err := readBootstrapAdmin(c.Envoy.ConfigPath)
	if err != nil || !ok {
		return
	}
	if admin.Port != int(c.Envoy.AdminPort) {
		ps.add("envoy.admin_port", "is %d, but the bootstrap %s puts Envoy's admin listener on port %d: they must agree",
			c.Envoy.AdminPort, c.Envoy.ConfigPath, admin.Port)
	}
	if ip, err := netip.ParseAddr(admin.Address); !c.Envoy.AllowRemoteAdmin && (err != nil || !ip.IsLoopback()) {
		ps.add("envoy.allow_remote_admin", "the bootstrap %s binds Envoy's admin listener to %q, reachable beyond this host: %s",
			c.Envoy.ConfigPath, admin.Address, "use 127.0.0.1, or set allow_remote_admin = true to accept it")
	}
}
