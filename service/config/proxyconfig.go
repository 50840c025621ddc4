//go:build linux

// The mapping of the configuration onto the envoy package's ProxyConfig.

package config

import (
	"github.com/envoy-agent/envoy-agent/envoy"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ProxyConfig maps the [envoy] table onto the envoy package's ProxyConfig.
func (c *Config) ProxyConfig() envoy.ProxyConfig {
	e := c.Envoy
	return envoy.ProxyConfig{
		LogLevel:               e.LogLevel,
		ComponentLogLevel:      e.ComponentLogLevel,
		NodeIPs:                e.NodeIPs,
		Sidecar:                e.DrainInboundOnly,
		LogAsJSON:              e.LogAsJSON,
		BinaryPath:             e.BinaryPath,
		ConfigPath:             e.ConfigPath,
		AdminPort:              int32(e.AdminPort),
		AdminSocket:            e.AdminSocket,
		DrainDuration:          durationpb.New(e.DrainDuration.D()),
		Concurrency:            e.Concurrency,
		ParentShutdownDuration: durationpb.New(e.ParentShutdownDuration.D()),
		BaseID:                 e.BaseID,
		ExtraArgs:              e.ExtraArgs,
		RunDir:                 c.RunDir(),
		LocalHost:              c.Agent.Localhost,
		AllowRemoteAdmin:       e.AllowRemoteAdmin,
		ResourceFiles:          c.Agent.ReloadMethod == ReloadAuto,
	}
}
