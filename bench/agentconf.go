package main

import (
	"cmp"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// agentConfig is the envoy-agent TOML configuration a scenario runs with.
type agentConfig struct {
	EnvoyBin         string
	BootstrapPath    string
	AdminPort        int
	StatusPort       int
	BaseID           uint32
	DrainDuration    time.Duration // Envoy's --drain-time-s (whole seconds)
	ParentShutdown   time.Duration // Envoy's --parent-shutdown-time-s (whole seconds)
	TerminationDrain time.Duration
	MinDrain         time.Duration
	ExitOnZero       bool
	RunDir           string
	LogLevel         string // the agent's; "" is warning
	ReloadMethod     string // [agent] reload_method; "" is "hot_restart" (every reload a hot restart), not the agent's default
}

// toml renders the configuration: one Envoy worker and quiet logs, to keep
// a 2-core machine for the measurements.
func (c agentConfig) toml() string {
	var b strings.Builder
	kv := func(k, v string) { fmt.Fprintf(&b, "%s = %s\n", k, v) }
	q := strconv.Quote
	b.WriteString("[envoy]\n")
	kv("binary_path", q(c.EnvoyBin))
	kv("config_path", q(c.BootstrapPath))
	kv("admin_port", strconv.Itoa(c.AdminPort))
	kv("base_id", strconv.FormatUint(uint64(c.BaseID), 10))
	kv("concurrency", "1")
	kv("log_level", q("warning"))
	kv("drain_duration", q(c.DrainDuration.String()))
	kv("parent_shutdown_duration", q(c.ParentShutdown.String()))
	b.WriteString("\n[agent]\n")
	kv("status_port", strconv.Itoa(c.StatusPort))
	kv("prometheus_port", "0")
	kv("termination_drain_duration", q(c.TerminationDrain.String()))
	kv("min_drain_duration", q(c.MinDrain.String()))
	kv("exit_on_zero_active_connections", strconv.FormatBool(c.ExitOnZero))
	kv("start_timeout", q("60s"))
	kv("run_dir", q(c.RunDir))
	kv("log_level", q(cmp.Or(c.LogLevel, "warning")))
	kv("reload_method", q(cmp.Or(c.ReloadMethod, "hot_restart")))
	return b.String()
}

func (c agentConfig) write(path string) error {
	if err := os.MkdirAll(c.RunDir, 0o755); err != nil {
		return fmt.Errorf("agent run_dir: %w", err)
	}
	return envoykit.WriteFileAtomic(path, []byte(c.toml()))
}
