package service

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/agnivade/levenshtein"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/envoy-agent/envoy-agent/envoy"
)

// maxConfigSize bounds the TOML file the agent reads.
const maxConfigSize = 1 << 20

// Config is the agent's configuration file, /etc/envoy-agent/config.toml.
// Its key names are a public interface: keys may be added, never renamed.
type Config struct {
	Envoy EnvoyConfig `toml:"envoy"`
	Agent AgentConfig `toml:"agent"`

	// File is the path the configuration was read from.
	File string `toml:"-"`
	// src is its text, to find the line of a key checked later.
	src keyLines
	// adminPortSet: the file sets envoy.admin_port (its default is not
	// wanted with admin_socket).
	adminPortSet bool
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
}

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
			AdminPort:              15000,
			LogLevel:               "info",
			DrainDuration:          Duration(envoy.DefaultDrainDuration),
			ParentShutdownDuration: Duration(envoy.DefaultParentShutdownDuration),
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
		},
	}
}

// LoadConfig reads and checks the configuration file at path. Relative
// paths in it are resolved against the file's folder. Every problem is
// returned in one *ConfigError, each naming the file, line and key.
func LoadConfig(path string) (*Config, error) {
	data, err := readConfigFile(path)
	if err != nil {
		return nil, &ConfigError{Problems: []Problem{{File: path, Msg: err.Error()}}}
	}
	cfg := DefaultConfig()
	cfg.File = path
	cfg.src = strings.Split(string(data), "\n")
	ps := &problems{file: path, lines: cfg.src}
	if err := checkNesting(data); err != nil {
		return nil, &ConfigError{Problems: []Problem{{File: path, Line: err.line, Msg: err.Error()}}}
	}
	md, err := toml.Decode(string(data), &cfg)
	if err != nil {
		return nil, &ConfigError{Problems: []Problem{decodeProblem(path, err)}}
	}
	cfg.adminPortSet = md.IsDefined("envoy", "admin_port")
	unknown := map[string]bool{}
	for _, k := range md.Undecoded() {
		unknown[k.String()] = true
		if len(k) > 1 && unknown[k[:len(k)-1].String()] {
			continue // inside an unknown table: the table is the problem
		}
		ps.add(k.String(), "unknown key%s", suggest(k))
	}
	cfg.resolvePaths()
	cfg.check(ps)
	if err := ps.err(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// typeErrRE matches the errors toml gives for a value of the wrong type,
// which are not ParseErrors.
var typeErrRE = regexp.MustCompile(`^toml: line (\d+) \(last key "([^"]*)"\): incompatible types: TOML value has type (\w+); destination has type (\w+)`)

// decodeProblem turns an error of toml.Decode into a Problem with the line
// and key where toml gives them.
func decodeProblem(path string, err error) Problem {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		return Problem{File: path, Line: pe.Position.Line, Key: pe.LastKey, Msg: pe.Message}
	}
	if m := typeErrRE.FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		return Problem{File: path, Line: line, Key: m[2], Msg: fmt.Sprintf("wrong type: want %s, got %s (incompatible types)", article(m[4]), article(m[3]))}
	}
	return Problem{File: path, Msg: err.Error()}
}

func article(typ string) string {
	if strings.ContainsRune("aeiou", rune(typ[0])) {
		return "an " + typ
	}
	return "a " + typ
}

func readConfigFile(path string) ([]byte, error) {
	data, err := readRegularFile(path, maxConfigSize)
	if err != nil {
		return nil, fmt.Errorf("cannot read the configuration: %w", err)
	}
	return data, nil
}

// knownKeys lists every key per table, for suggestions.
var knownKeys = map[string][]string{
	"envoy": tomlKeys(EnvoyConfig{}),
	"agent": tomlKeys(AgentConfig{}),
}

func suggest(k toml.Key) string {
	if len(k) == 1 {
		if _, ok := knownKeys[k[0]]; !ok {
			return " (the tables are [envoy] and [agent])"
		}
		return ""
	}
	keys, ok := knownKeys[k[0]]
	if !ok {
		return " (the tables are [envoy] and [agent])"
	}
	best, bestD := "", 3
	for _, cand := range keys {
		if d := levenshtein.ComputeDistance(k[len(k)-1], cand); d < bestD {
			best, bestD = cand, d
		}
	}
	if best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return ""
}

// resolvePaths makes config_path absolute against the configuration's
// folder, and binary_path too when it names a relative path with a slash; a
// bare name is looked up in PATH later.
func (c *Config) resolvePaths() {
	dir := filepath.Dir(c.File)
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	if c.Envoy.ConfigPath != "" && !filepath.IsAbs(c.Envoy.ConfigPath) {
		c.Envoy.ConfigPath = filepath.Join(dir, c.Envoy.ConfigPath)
	}
	if strings.Contains(c.Envoy.BinaryPath, "/") && !filepath.IsAbs(c.Envoy.BinaryPath) {
		c.Envoy.BinaryPath = filepath.Join(dir, c.Envoy.BinaryPath)
	}
	if c.Envoy.AdminSocket != "" && !filepath.IsAbs(c.Envoy.AdminSocket) {
		c.Envoy.AdminSocket = filepath.Join(dir, c.Envoy.AdminSocket)
	}
	if c.Agent.RunDir != "" && !filepath.IsAbs(c.Agent.RunDir) {
		c.Agent.RunDir = filepath.Join(dir, c.Agent.RunDir)
	}
	if c.Agent.ControlSocket != "" && !filepath.IsAbs(c.Agent.ControlSocket) {
		c.Agent.ControlSocket = filepath.Join(dir, c.Agent.ControlSocket)
	}
}

var envoyLogLevels = []string{"trace", "debug", "info", "warning", "warn", "error", "critical", "off"}
var agentLogLevels = []string{"trace", "debug", "info", "warning", "warn", "error", "fatal", "panic"}

func (c *Config) check(ps *problems) {
	e, a := &c.Envoy, &c.Agent
	if e.BinaryPath == "" {
		ps.add("envoy.binary_path", "must not be empty")
	} else if resolved, err := resolveBinary(e.BinaryPath); err != nil {
		ps.add("envoy.binary_path", "%v", err)
	} else {
		e.BinaryPath = resolved
	}
	if e.ConfigPath == "" {
		ps.add("envoy.config_path", "must not be empty")
	} else if err := checkReadable(e.ConfigPath); err != nil {
		ps.add("envoy.config_path", "Envoy bootstrap %v", err)
	} else if e.AdminPort != 0 || e.AdminSocket != "" {
		c.checkBootstrapAdmin(ps)
	}
	switch {
	case e.AdminSocket != "":
		c.checkAdminSocket(ps)
	case e.AdminPort == 0:
		ps.add("envoy.admin_port", "must be set (1-65535)")
	}
	base, comps := envoy.SplitLogLevel(e.LogLevel)
	if base != "" && !slices.Contains(envoyLogLevels, base) {
		ps.add("envoy.log_level", "unknown level %q (one of %s)", base, strings.Join(envoyLogLevels, ", "))
	}
	for _, comp := range append(strings.Split(comps, ","), strings.Split(e.ComponentLogLevel, ",")...) {
		if comp == "" {
			continue
		}
		name, lvl, ok := strings.Cut(comp, ":")
		key := "envoy.component_log_level"
		if strings.Contains(e.LogLevel, comp) {
			key = "envoy.log_level"
		}
		if !ok || strings.TrimSpace(name) == "" || !slices.Contains(envoyLogLevels, strings.TrimSpace(lvl)) {
			ps.add(key, "bad component level %q: want component:level, such as \"upstream:debug\"", comp)
		}
	}
	if e.Concurrency < 0 {
		ps.add("envoy.concurrency", "must not be negative (0 is Envoy's default)")
	}
	for _, ip := range e.NodeIPs {
		if _, err := netip.ParseAddr(ip); err != nil {
			ps.add("envoy.node_ips", "%q is not an IP address", ip)
		}
	}
	if e.DrainDuration.D() < time.Second {
		ps.add("envoy.drain_duration", "must be at least 1s (Envoy counts it in whole seconds)")
	}
	if e.ParentShutdownDuration.D() <= e.DrainDuration.D() {
		ps.add("envoy.parent_shutdown_duration", "must be longer than drain_duration (%s), got %s", e.DrainDuration.D(), e.ParentShutdownDuration.D())
	}

	if ip, err := netip.ParseAddr(a.Localhost); a.Localhost != "localhost" && (err != nil || !ip.IsLoopback()) {
		ps.add("agent.localhost", "%q must be a loopback address, such as 127.0.0.1 or ::1", a.Localhost)
	}
	if a.StatusPort == 0 {
		ps.add("agent.status_port", "must be set (1-65535)")
	}
	if _, err := netip.ParseAddr(a.PrometheusAddress); err != nil && a.PrometheusAddress != "localhost" {
		ps.add("agent.prometheus_address", "%q is not an IP address", a.PrometheusAddress)
	}
	ports := map[Port]string{}
	for _, p := range []struct {
		key  string
		port Port
	}{{"envoy.admin_port", e.AdminPort}, {"agent.status_port", a.StatusPort}, {"agent.prometheus_port", a.PrometheusPort}} {
		if p.port == 0 {
			continue
		}
		if other, dup := ports[p.port]; dup {
			ps.add(p.key, "port %d is also %s", p.port, other)
		}
		ports[p.port] = p.key
	}
	if a.TerminationDrainDuration.D() <= 0 {
		ps.add("agent.termination_drain_duration", "must be more than 0")
	}
	if a.MinDrainDuration.D() > a.TerminationDrainDuration.D() {
		ps.add("agent.min_drain_duration", "must not exceed termination_drain_duration (%s), got %s", a.TerminationDrainDuration.D(), a.MinDrainDuration.D())
	}
	if a.StartTimeout.D() <= 0 {
		ps.add("agent.start_timeout", "must be more than 0")
	}
	if !slices.Contains(agentLogLevels, a.LogLevel) {
		ps.add("agent.log_level", "unknown level %q (one of %s)", a.LogLevel, strings.Join(agentLogLevels, ", "))
	}
	if a.LogFormat != "text" && a.LogFormat != "json" {
		ps.add("agent.log_format", "unknown format %q (text or json)", a.LogFormat)
	}
	c.checkLimits(ps)
	if dir := c.runDir(); dir != "" {
		if _, err := os.Lstat(dir); err == nil {
			if err := envoy.CheckRunDir(dir); err != nil {
				ps.add("agent.run_dir", "%v", err)
			}
		}
	}
	c.checkControlSocket(ps)
}

// resolveBinary finds an executable Envoy: a bare name in PATH, a path as is.
func resolveBinary(p string) (string, error) {
	if !strings.Contains(p, "/") {
		found, err := exec.LookPath(p)
		if err != nil {
			return "", fmt.Errorf("envoy binary %q not found in PATH (%s)", p, os.Getenv("PATH"))
		}
		p = found
	}
	fi, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("envoy binary %w", err)
	}
	if fi.IsDir() {
		return "", fmt.Errorf("envoy binary %s is a directory", p)
	}
	if err := unix.Access(p, unix.X_OK); err != nil {
		return "", fmt.Errorf("envoy binary %s is not executable: %w", p, err)
	}
	return p, nil
}

func checkReadable(p string) error {
	f, err := openRegular(p)
	if err != nil {
		return err
	}
	return f.Close()
}

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
		RunDir:                 c.runDir(),
		LocalHost:              c.Agent.Localhost,
		AllowRemoteAdmin:       e.AllowRemoteAdmin,
	}
}

// runDir is where the agent keeps its runtime files: run_dir, else
// DefaultRunDir. It depends on the file alone (not on the environment), so
// that `envoy-agent reload` finds the control socket from any shell.
func (c *Config) runDir() string {
	if c.Agent.RunDir != "" {
		return c.Agent.RunDir
	}
	return defaultRunDir(c.File)
}

// defaultRunDir is run_dir when the file does not set it: DefaultRunDir for
// /etc/envoy-agent/config.toml (and any other file), and
// /run/envoy-agent-NAME for /etc/envoy-agent/NAME.toml, the file of the
// template unit's instance NAME, whose RuntimeDirectory that is. The agent
// and the commands that reach it (reload, status, reopen-logs) find the same
// folder from the file's name alone.
func defaultRunDir(file string) string {
	abs, err := filepath.Abs(file)
	if err != nil || filepath.Dir(abs) != instanceConfigDir {
		return DefaultRunDir
	}
	name := strings.TrimSuffix(filepath.Base(abs), ".toml")
	if name == "config" || name == filepath.Base(abs) || name == "" {
		return DefaultRunDir
	}
	return DefaultRunDir + "-" + name
}

// instanceConfigDir holds the template unit's instance files (NAME.toml).
const instanceConfigDir = "/etc/envoy-agent"
