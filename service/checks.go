package service

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// maxBaseID is the largest envoy.base_id: Envoy multiplies it by 10 in a
// 32-bit number to name its shared memory and domain sockets, so a larger
// one wraps around (4294967295 gives envoy_shared_memory_4294967286, seen
// with Envoy 1.40) into another base id's namespace.
const maxBaseID = (1<<32 - 1) / 10

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
	"--disable-hot-restart":      "nothing: reloads are hot restarts",
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

// versionTimeout bounds `envoy --version`.
const versionTimeout = 30 * time.Second

// checkIsEnvoy runs binary_path --version and wants Envoy's answer
// ("<path> version: <sha>/<x.y.z>/..."): any other executable would pass
// the checks on the path alone and then fail every start.
func (c *Config) checkIsEnvoy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, c.Envoy.BinaryPath, "--version")
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	text := strings.TrimSpace(out.String())
	if err == nil && strings.Contains(text, " version: ") && strings.Contains(text, "/") {
		return nil
	}
	why := "it printed no Envoy version"
	switch {
	case ctx.Err() != nil:
		why = fmt.Sprintf("--version did not answer within %s", versionTimeout)
	case err != nil:
		why = fmt.Sprintf("--version failed: %v", err)
	}
	ps := &problems{file: c.File, lines: c.src}
	ps.add("envoy.binary_path", "%s is not an Envoy: %s", c.Envoy.BinaryPath, why)
	return ps.err()
}
