//go:build linux

package config

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy/certs"
	"github.com/envoy-agent/envoy-agent/envoy/cli"
	"github.com/envoy-agent/envoy-agent/envoy/output"
	"github.com/envoy-agent/envoy-agent/envoy/versions"
	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
	"github.com/envoy-agent/envoy-agent/internal/printable"
	"github.com/envoy-agent/envoy-agent/internal/safefile"
)

// ValidateTimeout bounds `envoy --mode validate`.
const ValidateTimeout = 60 * time.Second

// ReloadBound is the longest a reload of c takes once it has begun, when
// it waits wait before its new Envoy starts (for the epoch the previous
// reload replaced, or a drain and restart's drain): the wait, the
// validation (ValidateTimeout), the new epoch's start and, should that
// fail, the start that restores the serving configuration (start_timeout
// each). Both systemd's EXTEND_TIMEOUT_USEC during a reload (with the wait
// as far as the agent knows it) and the reload client's deadline
// (ReloadClientTimeout, with the longest wait) are made of it.
func (c *Config) ReloadBound(wait time.Duration) time.Duration {
	return wait + 2*c.Agent.StartTimeout.D() + ValidateTimeout
}

// ReloadWaitBound is the longest a reload of c waits before its new Envoy
// starts: for the epoch the previous reload replaced, until Envoy itself
// ends it (parent_shutdown_duration, and the grace it has to exit), then,
// for an Envoy without hot restart, for the serving Envoy's drain
// (termination_drain_duration).
func (c *Config) ReloadWaitBound() time.Duration {
	return c.Envoy.ParentShutdownDuration.D() + cli.ReplacedExitGrace + c.Agent.TerminationDrainDuration.D()
}

// ReloadClientTimeout is how long `envoy-agent reload` waits for its
// answer: the longest reload (ReloadBound with ReloadWaitBound), and one
// validation more, for a request made while another reload's validation
// is under way (it is checked once that ends). With wait (`reload
// --wait`), also the reload guard's window (agent.reload_guard) and the
// rollback after it, which is a reload back to the configuration before
// and bounded as one (ReloadBound with ReloadWaitBound: a rollback by hot
// restart waits for the epoch the reload replaced).
func (c *Config) ReloadClientTimeout(wait bool) time.Duration {
	d := c.ReloadBound(c.ReloadWaitBound()) + ValidateTimeout
	if wait && c.Agent.ReloadGuard > 0 {
		d += c.Agent.ReloadGuard.D() + c.ReloadBound(c.ReloadWaitBound())
	}
	return d
}

// Validate checks the configuration file at path and has Envoy validate the
// copy of its bootstrap that run would start (envoy --mode validate;
// Config.RunningCopy), without starting anything. It writes each warning,
// each note of what that copy changes, then "OK" and a summary to out, or
// returns a *ConfigError listing every problem.
func Validate(ctx context.Context, path string, out io.Writer) error {
	cfg, err := LoadConfig(path)
	if err != nil {
		return err
	}
	running, remove, err := cfg.RunningCopy()
	if err != nil {
		return Problemf(cfg, "envoy.config_path", "Envoy bootstrap %v", err)
	}
	defer remove()
	check := *cfg
	check.Envoy.ConfigPath = running
	if err := ValidateBootstrap(ctx, &check, new(versions.Cache)); err != nil {
		return inFile(err, running, cfg.Envoy.ConfigPath)
	}
	inotify, err := cfg.CheckInotify()
	if err != nil {
		return err
	}
	// Paths, certificates' names and Envoy's words reach the terminal with
	// their control characters escaped (printable).
	for _, w := range cfg.Warnings() {
		fmt.Fprintf(out, "warning: %s\n", printable.String(w))
	}
	for _, w := range append(certificateWarnings(cfg, time.Now()), inotify...) {
		fmt.Fprintf(out, "warning: %s\n", printable.String(w))
	}
	for _, n := range cfg.Notes() {
		fmt.Fprintf(out, "note: %s\n", printable.String(n))
	}
	if n := cfg.ListenerNames(running); n != "" {
		fmt.Fprintf(out, "note: %s\n", printable.String(n))
	}
	fmt.Fprintf(out, "OK: %s\n", printable.String(fmt.Sprintf("%s is valid; %s accepts the bootstrap %s", cfg.File, cfg.Envoy.BinaryPath, cfg.Envoy.ConfigPath)))
	return nil
}

// inFile is err with the path of a copy of a bootstrap in its problems
// replaced by the path of the bootstrap it was made of.
func inFile(err error, copied, original string) error {
	var ce *ConfigError
	if errors.As(err, &ce) && copied != original {
		for i := range ce.Problems {
			ce.Problems[i].File = strings.ReplaceAll(ce.Problems[i].File, copied, original)
			ce.Problems[i].Msg = strings.ReplaceAll(ce.Problems[i].Msg, copied, original)
		}
	}
	return err
}

// certificateWarnings warns of the bootstrap's certificates (those named by
// file, which the agent serves and watches) that have expired or expire
// within 14 days. It refuses nothing: Envoy serves an expired certificate,
// and a renewal is taken as it comes.
func certificateWarnings(cfg *Config, now time.Time) []string {
	data, err := safefile.ReadRegular(cfg.Envoy.ConfigPath, bootyaml.MaxSize)
	if err != nil {
		return nil // Envoy's validation has said what is wrong with it
	}
	cs, err := certs.Inspect(data, cfg.Envoy.ConfigPath)
	w := certs.ExpiryWarnings(cs, now)
	if err != nil {
		w = append(w, fmt.Sprintf("certificates: %v", err))
	}
	return w
}

// ValidateBootstrap runs `envoy --mode validate` on the bootstrap, with the
// operator's extra arguments (they may change what Envoy loads), and beside
// it `envoy --version` (answered from versions when the binary has not
// changed), which must say it is an Envoy: that problem is reported first.
func ValidateBootstrap(ctx context.Context, cfg *Config, versions *versions.Cache) error {
	isEnvoy := make(chan error, 1)
	go func() { isEnvoy <- cfg.checkIsEnvoy(ctx, versions) }()
	err := runValidate(ctx, cfg)
	if notEnvoy := <-isEnvoy; notEnvoy != nil {
		return notEnvoy
	}
	return err
}

// runValidate runs `envoy --mode validate` on cfg's bootstrap.
func runValidate(ctx context.Context, cfg *Config) error {
	ctx, cancel := context.WithTimeout(ctx, ValidateTimeout)
	defer cancel()
	args := []string{"--mode", "validate", "-c", cfg.Envoy.ConfigPath, "-l", "warning", "--disable-hot-restart"}
	args = append(args, cfg.Envoy.ExtraArgs...)
	cmd := exec.CommandContext(ctx, cfg.Envoy.BinaryPath, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err == nil {
		return nil
	}
	why := envoyComplaint(out.String())
	if why == "" {
		why = err.Error()
	}
	if ctx.Err() != nil {
		why = fmt.Sprintf("envoy --mode validate did not finish within %s", ValidateTimeout)
	}
	return &ConfigError{Problems: []Problem{{
		File: cfg.Envoy.ConfigPath,
		Msg:  "Envoy rejects this bootstrap: " + why,
	}}}
}

// envoyComplaint picks the reason out of Envoy's output: its critical and
// error lines without the log prefix, and the last line when a proto dump
// stands between the two halves of the message. Envoy's copies of the
// bootstrap (secrets and all) are left out first (output.Redact).
func envoyComplaint(text string) string {
	lines := output.Redact(strings.Split(strings.TrimSpace(text), "\n"))
	var parts []string
	firstErr := -1
	for i, l := range lines {
		if strings.Contains(l, "[critical]") || strings.Contains(l, "[error]") {
			if firstErr < 0 {
				firstErr = i
			}
			parts = append(parts, stripEnvoyLogPrefix(l))
		}
	}
	if firstErr >= 0 && firstErr < len(lines)-1 {
		last := strings.TrimSpace(lines[len(lines)-1])
		if last != "" && !strings.Contains(last, "[critical]") && !strings.Contains(last, "[error]") {
			parts = append(parts, strings.TrimPrefix(last, ": "))
		}
	}
	if len(parts) == 0 && len(lines) > 0 {
		return printable.String(strings.TrimSpace(lines[len(lines)-1]))
	}
	return printable.String(strings.Join(parts, " "))
}

// stripEnvoyLogPrefix removes "[time][thread][level][component] [file:line] ",
// Envoy's default log prefix.
func stripEnvoyLogPrefix(l string) string {
	if i := strings.Index(l, "] ["); i >= 0 {
		if j := strings.Index(l[i+3:], "] "); j >= 0 {
			l = l[i+3+j+2:]
		}
	}
	return strings.TrimSuffix(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(l), "goo.gle/debugonly")), ":")
}
