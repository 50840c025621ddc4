//go:build linux

package config

import "fmt"

// restartOnly lists the keys a reload cannot change, and how to read them.
var restartOnly = []struct {
	key string
	get func(*Config) any
}{
	{"envoy.admin_port", func(c *Config) any { return c.Envoy.AdminPort }},
	{"envoy.admin_socket", func(c *Config) any { return c.Envoy.AdminSocket }},
	{"envoy.base_id", func(c *Config) any { return c.Envoy.BaseID }},
	{"agent.localhost", func(c *Config) any { return c.Agent.Localhost }},
	{"agent.status_port", func(c *Config) any { return c.Agent.StatusPort }},
	{"agent.prometheus_port", func(c *Config) any { return c.Agent.PrometheusPort }},
	{"agent.prometheus_address", func(c *Config) any { return c.Agent.PrometheusAddress }},
	{"agent.run_dir", func(c *Config) any { return c.RunDir() }},
	{"agent.control_socket", func(c *Config) any { return c.ControlSocketPath() }},
}

// RestartOnlyChanges names the keys that differ between old and new and
// need a restart.
func RestartOnlyChanges(old, new *Config) []string {
	var keys []string
	for _, k := range restartOnly {
		if k.get(old) != k.get(new) {
			keys = append(keys, fmt.Sprintf("%s (%v -> %v)", k.key, k.get(old), k.get(new)))
		}
	}
	return keys
}
