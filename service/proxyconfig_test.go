//go:build linux

package service

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/service/config"
)

// TestProxyConfigOf: every key of the [envoy] table reaches the envoy
// package's ProxyConfig, with the run directory and localhost, and
// reload_method = "auto" asks for the listeners and clusters as resource
// files.
func TestProxyConfigOf(t *testing.T) {
	dir := t.TempDir()
	c := &config.Config{
		Envoy: config.EnvoyConfig{
			LogLevel:               "warning,upstream:debug",
			ComponentLogLevel:      "http:trace",
			NodeIPs:                []string{"::1"},
			DrainInboundOnly:       true,
			LogAsJSON:              true,
			BinaryPath:             "/usr/bin/envoy",
			ConfigPath:             "/etc/envoy-agent/envoy.yaml",
			AdminPort:              15000,
			AdminSocket:            "",
			DrainDuration:          config.Duration(10 * time.Second),
			Concurrency:            3,
			ParentShutdownDuration: config.Duration(15 * time.Second),
			BaseID:                 7,
			ExtraArgs:              []string{"--disable-extensions", "x"},
			AllowRemoteAdmin:       true,
		},
		Agent: config.AgentConfig{Localhost: "::1", RunDir: filepath.Join(dir, "run"), ReloadMethod: config.ReloadAuto},
	}
	pc := proxyConfigOf(c)
	if pc.LogLevel != "warning,upstream:debug" || pc.ComponentLogLevel != "http:trace" || len(pc.NodeIPs) != 1 || !pc.Sidecar ||
		!pc.LogAsJSON || pc.BinaryPath != "/usr/bin/envoy" || pc.ConfigPath != "/etc/envoy-agent/envoy.yaml" || pc.AdminPort != 15000 ||
		pc.DrainDuration.AsDuration() != 10*time.Second || pc.Concurrency != 3 || pc.ParentShutdownDuration.AsDuration() != 15*time.Second ||
		pc.BaseID != 7 || len(pc.ExtraArgs) != 2 || !pc.AllowRemoteAdmin || pc.LocalHost != "::1" || pc.RunDir == "" || pc.RunDir != c.RunDir() ||
		!pc.ResourceFiles {
		t.Fatalf("proxyConfigOf = %+v", pc)
	}
}
