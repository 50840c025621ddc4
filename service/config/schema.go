//go:build linux

// The TOML schema: the tables, their keys and types, and the defaults.

package config

import (
	"fmt"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy/cli"
	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
	"github.com/envoy-agent/envoy-agent/service/guard"
)

// Config is the agent's configuration file, /etc/envoy-agent/config.toml.
// Its key names are a public interface: keys may be added, never renamed.
type Config struct {
	Envoy EnvoyConfig `toml:"envoy"`
	Agent AgentConfig `toml:"agent"`

	// File is the path the configuration was read from.
	File string `toml:"-"`
	// src is its text, to find the line of a key checked later.
	src *keyLines
	// adminPortSet: the file sets envoy.admin_port (its default is not
	// wanted with admin_socket).
	adminPortSet bool
	// adminSocketDefault: neither admin key is set, and the admin is on
	// the default socket (runningcopy.go).
	adminSocketDefault bool
	// warnings are what a valid configuration should still change
	// (Warnings).
	warnings []string
	// notes say what the agent changes in its copy of the bootstrap
	// (Notes).
	notes []string
	// sum is the SHA-256 of the text it was loaded from (Sum).
	sum string
	// inotify is what Envoy and the agent will watch for the bootstrap
	// (CheckInotify), counted as it was checked; zero when it was not (a
	// bootstrap that does not parse).
	inotify InotifyNeed
	// keepStart: a start's configuration (LoadStartConfig), which keeps
	// the bootstrap as its check decoded it in start, until
	// TakeStartBootstrap.
	keepStart bool
	start     *bootyaml.Decoded
	// startFiles are the files the bootstrap names, which a start's
	// configuration judges late (BootstrapFileWarnings).
	startFiles []bootstrapFile
}

// Warnings are what the checks found that does not make the configuration
// invalid but that the operator should change, each a sentence naming the
// file or key; validate prints them and run logs them, once.
func (c *Config) Warnings() []string { return c.warnings }

func (c *Config) warnf(format string, args ...any) {
	c.warnings = append(c.warnings, fmt.Sprintf(format, args...))
}

// Notes say what the agent changes in the copy of the bootstrap that
// Envoy runs and the operator need not change (runningcopy.go), each a
// sentence naming the file; validate prints them and run logs them, once.
func (c *Config) Notes() []string { return c.notes }

func (c *Config) notef(format string, args ...any) {
	c.notes = append(c.notes, fmt.Sprintf(format, args...))
}

// EnvoyConfig is the [envoy] table: how Envoy is launched.
type EnvoyConfig struct {
	BinaryPath             string   `toml:"binary_path"`
	ConfigPath             string   `toml:"config_path"`
	AdminPort              Port     `toml:"admin_port"`
	AdminSocket            string   `toml:"admin_socket"`
	LogLevel               string   `toml:"log_level"`
	ComponentLogLevel      string   `toml:"component_log_level"`
	LogAsJSON              bool     `toml:"log_as_json"`
	Concurrency            int32    `toml:"concurrency"`
	NodeIPs                []string `toml:"node_ips"`
	DrainDuration          Duration `toml:"drain_duration"`
	ParentShutdownDuration Duration `toml:"parent_shutdown_duration"`
	BaseID                 uint32   `toml:"base_id"`
	ExtraArgs              []string `toml:"extra_args"`
	DrainInboundOnly       bool     `toml:"drain_inbound_only"`
	AllowRemoteAdmin       bool     `toml:"allow_remote_admin"`
}

// AgentConfig is the [agent] table: the agent's own ports and timings.
type AgentConfig struct {
	Localhost                   string   `toml:"localhost"`
	StatusPort                  Port     `toml:"status_port"`
	PrometheusPort              Port     `toml:"prometheus_port"`
	PrometheusAddress           string   `toml:"prometheus_address"`
	TerminationDrainDuration    Duration `toml:"termination_drain_duration"`
	MinDrainDuration            Duration `toml:"min_drain_duration"`
	ExitOnZeroActiveConnections bool     `toml:"exit_on_zero_active_connections"`
	StartTimeout                Duration `toml:"start_timeout"`
	LogLevel                    string   `toml:"log_level"`
	LogFormat                   string   `toml:"log_format"`
	RunDir                      string   `toml:"run_dir"`
	ControlSocket               string   `toml:"control_socket"`
	// ReloadMethod is "" (the default: ReloadAuto), ReloadAuto or
	// ReloadHotRestart (InPlace says which). Left out of the JSON when "":
	// a live upgrade's state (package handover) then stays readable by an
	// agent that predates the key.
	ReloadMethod string `toml:"reload_method" json:",omitempty"`
	// ReloadGuard is how long the reload guard watches Envoy's traffic
	// after a reload (guard.go); 0, the default, turns it off. With
	// ReloadGuardURL, left out of the JSON when unset, as ReloadMethod.
	ReloadGuard    Duration `toml:"reload_guard" json:",omitempty"`
	ReloadGuardURL string   `toml:"reload_guard_url" json:",omitempty"`
	// The guard's thresholds (GuardThresholds). Left out of a live
	// upgrade's state: the guard judges a reload with the thresholds of
	// the file that reload read, never with those handed over.
	ReloadGuardErrorRise    Ratio `toml:"reload_guard_error_rise" json:"-"`
	ReloadGuardMinRequests  int64 `toml:"reload_guard_min_requests" json:"-"`
	ReloadGuardHealthyShare Ratio `toml:"reload_guard_healthy_share" json:"-"`
}

// InPlace reports whether Envoy runs from resource files that a reload
// can change in place: reload_method "auto", the default.
func (a AgentConfig) InPlace() bool { return a.ReloadMethod != ReloadHotRestart }

// Port is a TCP port number in a TOML file.
type Port uint16

// UnmarshalTOML takes an integer from 0 to 65535.
func (p *Port) UnmarshalTOML(v any) error {
	n, ok := v.(int64)
	if !ok {
		return fmt.Errorf("wrong type: want a port number, got %s", tomlType(v))
	}
	if n < 0 || n > 65535 {
		return fmt.Errorf("port %d is out of range (1-65535)", n)
	}
	*p = Port(n)
	return nil
}

// Duration is a duration written as a string in a TOML file ("45s", "1m30s").
type Duration time.Duration

// UnmarshalTOML takes a Go duration string that is not negative.
func (d *Duration) UnmarshalTOML(v any) error {
	s, ok := v.(string)
	if !ok {
		return fmt.Errorf("wrong type: want a duration string such as \"45s\", got %s", tomlType(v))
	}
	td, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("bad duration %q: want a number with a unit, such as \"45s\" or \"500ms\"", s)
	}
	if td < 0 {
		return fmt.Errorf("bad duration %q: must not be negative", s)
	}
	*d = Duration(td)
	return nil
}

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func tomlType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// DefaultConfig is the configuration an empty file gives; defaults follow
// Istio's where it has them.
func DefaultConfig() Config {
	return Config{
		Envoy: EnvoyConfig{
			BinaryPath:             "envoy",
			ConfigPath:             "/etc/envoy/envoy.yaml",
			LogLevel:               "info",
			DrainDuration:          Duration(cli.DefaultDrainDuration),
			ParentShutdownDuration: Duration(cli.DefaultParentShutdownDuration),
		},
		Agent: AgentConfig{
			Localhost:                "127.0.0.1",
			StatusPort:               15020,
			PrometheusPort:           15090,
			PrometheusAddress:        "127.0.0.1",
			TerminationDrainDuration: Duration(5 * time.Second),
			MinDrainDuration:         Duration(5 * time.Second),
			StartTimeout:             Duration(60 * time.Second),
			LogLevel:                 "info",
			LogFormat:                "text",
			ReloadGuardErrorRise:     guard.DefaultErrorRise,
			ReloadGuardMinRequests:   guard.DefaultMinRequests,
			ReloadGuardHealthyShare:  guard.DefaultHealthyShare,
		},
	}
}

// The values of agent.reload_method.
const (
	// ReloadAuto (the default) changes routes and clusters, and adds
	// listeners, in place when a reload changes only those, and hot
	// restarts otherwise.
	ReloadAuto = "auto"
	// ReloadHotRestart hot restarts at every reload.
	ReloadHotRestart = "hot_restart"
)
