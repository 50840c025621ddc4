//go:build linux

package config

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/envoy/cli"
	"github.com/envoy-agent/envoy-agent/envoy/versions"
	"github.com/envoy-agent/envoy-agent/internal/hostfiles"
)

// maxBaseID is the largest envoy.base_id: Envoy multiplies it by
// hostfiles.BaseIDScale in a 32-bit number to name its shared memory and
// domain sockets (hostfiles.SharedMemoryPath), so a larger one wraps around
// (4294967295 gives envoy_shared_memory_4294967286, seen with Envoy 1.40)
// into another base id's namespace.
const maxBaseID = (1<<32 - 1) / hostfiles.BaseIDScale

// maxDuration bounds every duration key. An hour is beyond any drain or
// start worth waiting for, and far from where a time.Duration overflows
// ("2562047h" is its maximum: a deadline built on it wraps).
const maxDuration = time.Hour

// durationKeys are the duration keys and how to read them, for the bound.
var durationKeys = []struct {
	key string
	get func(*Config) Duration
}{
	{"envoy.drain_duration", func(c *Config) Duration { return c.Envoy.DrainDuration }},
	{"envoy.parent_shutdown_duration", func(c *Config) Duration { return c.Envoy.ParentShutdownDuration }},
	{"agent.termination_drain_duration", func(c *Config) Duration { return c.Agent.TerminationDrainDuration }},
	{"agent.min_drain_duration", func(c *Config) Duration { return c.Agent.MinDrainDuration }},
	{"agent.start_timeout", func(c *Config) Duration { return c.Agent.StartTimeout }},
	{"agent.reload_guard", func(c *Config) Duration { return c.Agent.ReloadGuard }},
}

// agentOwnedFlags are Envoy's flags the agent sets itself (envoy/args.go)
// or that change what Envoy does with its command line; in extra_args they
// would fight the agent's own (a second --base-id or --restart-epoch breaks
// hot restart, a second --admin-address-path hides the admin address from
// the agent). The value says what to use instead.
var agentOwnedFlags = map[string]string{
	"-c":                         "envoy.config_path",
	"--config-path":              "envoy.config_path",
	"--base-id":                  "envoy.base_id",
	"--use-dynamic-base-id":      "envoy.base_id",
	"--base-id-path":             "envoy.base_id",
	"--restart-epoch":            "nothing: the agent numbers the epochs",
	"--hot-restart-version":      "nothing: the agent asks for it",
	"--disable-hot-restart":      "nothing: the agent passes it to an Envoy built without hot restart",
	"--admin-address-path":       "nothing: the agent reads the admin address from its own file",
	"--drain-time-s":             "envoy.drain_duration",
	"--parent-shutdown-time-s":   "envoy.parent_shutdown_duration",
	"--drain-strategy":           "nothing: the agent drains immediately on stop",
	"--local-address-ip-version": "envoy.node_ips",
	"--file-flush-interval-msec": "nothing: the agent sets it",
	"-l":                         "envoy.log_level",
	"--log-level":                "envoy.log_level",
	"--component-log-level":      "envoy.component_log_level",
	"--log-format":               "envoy.log_as_json",
	"--concurrency":              "envoy.concurrency",
	"--mode":                     "nothing: `envoy-agent validate` runs --mode validate",
	"--version":                  "nothing",
	"-h":                         "nothing",
	"--help":                     "nothing",
}

// checkLimits adds a problem for each duration above maxDuration, a base
// id above maxBaseID and each agent-owned flag in extra_args.
func (c *Config) checkLimits(ps *problems) {
	for _, d := range durationKeys {
		if v := d.get(c).D(); v > maxDuration {
			ps.add(d.key, "%s is more than the %s the agent allows", v, maxDuration)
		}
	}
	if c.Envoy.BaseID > maxBaseID {
		ps.add("envoy.base_id", "%d is more than %d: Envoy multiplies it by 10 in 32 bits to name its shared memory, which would wrap around",
			c.Envoy.BaseID, maxBaseID)
	}
	for _, a := range c.Envoy.ExtraArgs {
		name, _, _ := strings.Cut(a, "=")
		if use, owned := agentOwnedFlags[name]; owned {
			ps.add("envoy.extra_args", "%q is set by the agent; use %s", a, use)
		}
	}
}

// checkIsEnvoy runs binary_path --version (once per file: versions caches
// the answer) and wants Envoy's answer ("<path> version: <sha>/<x.y.z>/..."):
// any other executable would pass the checks on the path alone and then
// fail every start.
func (c *Config) checkIsEnvoy(ctx context.Context, versions *versions.Cache) error {
	text, err := versions.Version(ctx, c.Envoy.BinaryPath)
	if err == nil && strings.Contains(text, " version: ") && strings.Contains(text, "/") {
		return nil
	}
	why := "it printed no Envoy version"
	if err != nil {
		why = fmt.Sprintf("--version failed: %v", err)
	}
	ps := &problems{file: c.File, lines: c.src}
	ps.add("envoy.binary_path", "%s is not an Envoy: %s", c.Envoy.BinaryPath, why)
	return ps.err()
}

var envoyLogLevels = []string{"trace", "debug", "info", "warning", "warn", "error", "critical", "off"}

// envoyLeakyLevels are Envoy's levels at which it logs what the bootstrap
// holds and what clients send: at trace, listener_manager_impl.cc's
// "config: {...}" repeats each listener's configuration, and the codecs,
// the router and the health checker dump headers (a bootstrap's bearer
// token came out 4 times; clients' Authorization headers would too). Which
// of Envoy's ~80 components dump what at debug is not something the relay
// can know, so no line filter can promise to catch it: the levels are
// refused instead, for the base level and every component.
var envoyLeakyLevels = []string{"trace", "debug"}

// leakyLevelWhy is the reason given for refusing a level of envoyLeakyLevels.
const leakyLevelWhy = "at debug and trace Envoy logs its configuration and request headers (the bootstrap's secrets, clients' Authorization headers), which would reach the journal; use info or above (docs/operations.md, Reliability and security)"

var agentLogLevels = []string{"trace", "debug", "info", "warning", "warn", "error", "fatal", "panic"}

// check finds every problem of the configuration; fileTrust is the
// judgement of the file itself (readTrustedConfigFile).
func (c *Config) check(ps *problems, fileTrust error) {
	e, a := &c.Envoy, &c.Agent
	if e.BinaryPath == "" {
		ps.add("envoy.binary_path", "must not be empty")
	} else if resolved, err := resolveBinary(e.BinaryPath); err != nil {
		ps.add("envoy.binary_path", "%v", err)
	} else {
		e.BinaryPath = resolved
	}
	c.defaultAdmin()
	var doc *yaml.Node // the bootstrap, decoded once for every check of it
	if e.ConfigPath == "" {
		ps.add("envoy.config_path", "must not be empty")
	} else if err := checkReadable(e.ConfigPath); err != nil {
		ps.add("envoy.config_path", "Envoy bootstrap %v", err)
	} else {
		doc = c.decodeBootstrap(ps)
	}
	c.checkWriters(ps, doc, fileTrust)
	if doc != nil {
		c.checkBootstrap(ps, doc)
	}
	switch {
	case e.AdminSocket != "":
		c.checkAdminSocket(ps)
	case e.AdminPort == 0:
		ps.add("envoy.admin_port", "must be set (1-65535)")
	default:
		c.warnTCPAdmin()
	}
	base, comps := cli.SplitLogLevel(e.LogLevel)
	if base != "" && !slices.Contains(envoyLogLevels, base) {
		ps.add("envoy.log_level", "unknown level %q (one of %s)", base, strings.Join(envoyLogLevels, ", "))
	}
	if slices.Contains(envoyLeakyLevels, base) {
		ps.add("envoy.log_level", "%q is refused: %s", base, leakyLevelWhy)
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
		switch {
		case !ok || strings.TrimSpace(name) == "" || !slices.Contains(envoyLogLevels, strings.TrimSpace(lvl)):
			ps.add(key, "bad component level %q: want component:level, such as \"upstream:warning\"", comp)
		case slices.Contains(envoyLeakyLevels, strings.TrimSpace(lvl)):
			ps.add(key, "%q is refused: %s", comp, leakyLevelWhy)
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
	if a.ReloadMethod != "" && a.ReloadMethod != ReloadAuto && a.ReloadMethod != ReloadHotRestart {
		ps.add("agent.reload_method", "unknown method %q (auto or hot_restart)", a.ReloadMethod)
	}
	if a.LogFormat != "text" && a.LogFormat != "json" {
		ps.add("agent.log_format", "unknown format %q (text or json)", a.LogFormat)
	}
	c.checkLimits(ps)
	c.checkGuard(ps)
	runDirOK := true
	if dir := c.RunDir(); dir != "" {
		if err := hostfiles.CheckHotRestartSocketPath(dir, c.Envoy.BaseID); err != nil {
			ps.add("agent.run_dir", "%v", err)
		}
		if err := hostfiles.CheckNewRunDir(dir, judgeFolderOwners()); err != nil {
			ps.add("agent.run_dir", "%v", err)
			runDirOK = false
		}
	}
	c.checkControlSocket(ps, runDirOK)
}

// judgeFolderOwners says whether the checks of the agent's folders (run_dir,
// the sockets' folders) judge who owns each: not when root validates, as
// root may validate a file whose run_dir the service user owns (systemd's
// RuntimeDirectory=); the agent judges the owners when it runs (Run).
func judgeFolderOwners() bool { return os.Geteuid() != 0 }
