//go:build linux

// Command envoy-agent supervises one Envoy on a systemd host: it starts
// Envoy, tells systemd when Envoy is ready, feeds the watchdog while Envoy
// answers, and drains Envoy gracefully on stop.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/envoy-agent/envoy-agent/service"
	"github.com/envoy-agent/envoy-agent/service/config"
	"github.com/envoy-agent/envoy-agent/service/control"
	"github.com/envoy-agent/envoy-agent/service/handover"
	"github.com/envoy-agent/envoy-agent/service/manual"
	"github.com/envoy-agent/envoy-agent/service/systemd"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// Exit codes, documented in README.md.
const (
	exitOK         = 0
	exitFailure    = 1                  // Envoy exited by itself, was never LIVE, or the agent failed
	exitUsage      = handover.ExitUsage // the command line is wrong (2)
	exitBadConfig  = 3                  // the configuration is invalid; nothing was started
	exitFallback   = 4                  // upgrade: the running agent cannot hand over; restart the unit to switch
	exitRolledBack = 5                  // reload --wait: the reload guard rolled the reload back
)

// Exit codes of `envoy-agent status`, as LSB init scripts' status action
// has them, documented in README.md.
const (
	exitStatusRunning    = 0 // the agent answered (starting, live, reloading or draining)
	exitStatusNotRunning = 3 // no agent answers: stopped
	exitStatusUnknown    = 4 // the configuration file cannot be read, or the answer is not a status
)

// The commands, their help and the default configuration file are declared in service/manual,
// which the man pages are generated from too. The help is built when it is
// printed, not at every start.
const defaultConfig = manual.DefaultConfig

// The main goroutine stays on the main thread: it is the thread that forks
// every Envoy and re-executes the agent on an upgrade (envoy/reexec).
func init() { runtime.LockOSThread() }

func main() {
	os.Exit(service.ServeForkerOnMainThread(func() int { return run(os.Args[1:], os.Stdout, os.Stderr) }))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, manual.Usage())
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "run":
		path, code := configFlag("run", rest, stdout, stderr)
		if code >= 0 {
			return code
		}
		// Signals first, before the configuration is read: a SIGTERM or
		// SIGHUP during start-up must not kill the agent with the default
		// action and leave nothing drained.
		ctx, sigs, stopSignals := systemd.NotifySignals(context.Background())
		defer stopSignals()
		oneProcessor()
		return exitCode(service.Run(ctx, service.Options{ConfigPath: path, Version: version, Stderr: stderr, Signals: sigs}), stderr)
	case "validate":
		path, on, code := commandFlags(cmd, rest, stdout, stderr)
		if code >= 0 {
			return code
		}
		if err := config.Validate(context.Background(), path, stdout); err != nil || !on["plan"] {
			return exitCode(err, stderr)
		}
		candidate, err := control.LoadCandidate(context.Background(), path)
		if err != nil {
			return exitCode(err, stderr)
		}
		return exitCode(control.RequestPlan(context.Background(), path, candidate, false, stdout), stderr)
	case "reload":
		path, on, code := commandFlags(cmd, rest, stdout, stderr)
		if code >= 0 {
			return code
		}
		opts := control.ReloadOptions{Wait: on["wait"], Force: on["force"], DryRun: on["dry-run"]}
		if opts.DryRun && opts.Wait {
			fmt.Fprintf(stderr, "envoy-agent reload: --dry-run changes nothing: there is nothing to --wait for\n")
			return exitUsage
		}
		return exitCode(control.RequestReload(context.Background(), path, opts, stdout), stderr)
	case "reopen-logs":
		path, code := configFlag(cmd, rest, stdout, stderr)
		if code >= 0 {
			return code
		}
		return exitCode(control.RequestReopenLogs(context.Background(), path, stdout), stderr)
	case "status":
		return statusCommand(rest, stdout, stderr)
	case "upgrade":
		path, code := configFlag("upgrade", rest, stdout, stderr)
		if code >= 0 {
			return code
		}
		err := control.RequestUpgrade(context.Background(), path, stdout)
		var fe *control.FallbackError
		if errors.As(err, &fe) {
			fmt.Fprintf(stderr, "envoy-agent: %v\n", err)
			return exitFallback
		}
		return exitCode(err, stderr)
	case "version":
		fs := flag.NewFlagSet("version", flag.ContinueOnError)
		fs.SetOutput(stderr)
		versions := fs.Bool("handover", false, "also print the handover state versions this binary reads (for live upgrades)")
		check := fs.String("handover-check", "", "read the handover state `file` a running agent wrote, as after a live upgrade's exec, and say whether this binary can adopt it")
		fs.Usage = func() {
			fmt.Fprintf(fs.Output(), "Usage: envoy-agent version [--handover] [--handover-check FILE]\n\n%s\n\nFlags:\n", describe("version"))
			fs.PrintDefaults()
		}
		if err := fs.Parse(rest); err != nil {
			return helpOrUsage(err)
		}
		if *check != "" {
			if err := handover.CheckState(*check, stdout); err != nil {
				fmt.Fprintf(stderr, "envoy-agent: %v\n", err)
				return exitFailure
			}
			return exitOK
		}
		if *versions {
			fmt.Fprint(stdout, handover.VersionText(version))
			return exitOK
		}
		fmt.Fprintf(stdout, "envoy-agent %s\n", version)
		return exitOK
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, manual.Usage())
		return exitOK
	default:
		fmt.Fprintf(stderr, "envoy-agent: unknown command %q\n\n%s", cmd, manual.Usage())
		return exitUsage
	}
}

// describe is a command's description from service/manual, as a sentence without markup.
func describe(name string) string {
	c, _ := manual.Lookup(name)
	d := strings.ReplaceAll(c.Description, "`", "")
	return strings.ToUpper(d[:1]) + d[1:] + "."
}

// configFlag parses a command's flags: --config FILE. code is -1 to go on.
func configFlag(name string, args []string, stdout, stderr io.Writer) (path string, code int) {
	path, _, code = commandFlags(name, args, stdout, stderr)
	return path, code
}

// commandFlags parses a command's flags: --config FILE and the switches
// service/manual declares for it (on, by name). code is -1 to go on.
func commandFlags(name string, args []string, stdout, stderr io.Writer) (path string, on map[string]bool, code int) {
	what := describe(name)
	c, _ := manual.Lookup(name)
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&path, "config", defaultConfig, "the agent's TOML configuration `file`")
	set := map[string]*bool{}
	for _, f := range c.Flags {
		set[f.Name] = fs.Bool(f.Name, false, strings.ReplaceAll(f.Usage, "`", ""))
	}
	synopsis := "[--config FILE]"
	if c.Args != "" {
		synopsis = c.Args
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: envoy-agent %s %s\n\n%s\n\nFlags:\n", name, synopsis, what)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return "", nil, exitOK
		}
		return "", nil, exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "envoy-agent %s: unexpected argument %q\n", name, fs.Arg(0))
		return "", nil, exitUsage
	}
	on = map[string]bool{}
	for n, v := range set {
		on[n] = *v
	}
	return path, on, -1
}

func helpOrUsage(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitUsage
}

// exitCode prints err and maps it to the process's exit code.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	// Under systemd every line is marked as an error for journald (systemd.ErrorLines).
	say := func(format string, args ...any) {
		fmt.Fprint(stderr, systemd.ErrorLines(stderr, fmt.Sprintf(format, args...)))
	}
	var ce *config.ConfigError
	if errors.As(err, &ce) {
		say("envoy-agent: invalid configuration:\n%s\n", indent(ce.Error()))
		return exitBadConfig
	}
	if control.IsConfigReloadError(err) {
		say("envoy-agent: %v\n", err)
		return exitBadConfig
	}
	if control.IsRolledBack(err) {
		say("envoy-agent: %v\n", err)
		return exitRolledBack
	}
	var ae *service.AdminAddressError
	if errors.As(err, &ae) {
		say("envoy-agent: invalid configuration: %v\n", err)
		return exitBadConfig
	}
	say("envoy-agent: %v\n", err)
	return exitFailure
}

func indent(s string) string { return "  " + strings.ReplaceAll(s, "\n", "\n  ") }

// statusCommand is `envoy-agent status [--config FILE] [--json]`.
func statusCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", defaultConfig, "the agent's TOML configuration `file`")
	asJSON := fs.Bool("json", false, "print the status report as JSON (schema_version 1, documented in README.md)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: envoy-agent status [--config FILE] [--json]\n\n%s\n\nFlags:\n",
			"Show what the agent running with this configuration and its Envoy are doing: state, epochs,\n"+
				"versions, connections, listeners, the drain and the last reload.\n"+
				"Exit status: 0 running, 3 not running (stopped), 4 unknown (unreadable file or answer).")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "envoy-agent status: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	err := control.RequestStatus(context.Background(), *path, *asJSON, stdout)
	var nr *control.NotRunningError
	var ce *config.ConfigError
	switch {
	case err == nil:
		return exitStatusRunning
	case errors.As(err, &nr):
		return exitStatusNotRunning
	case errors.As(err, &ce):
		fmt.Fprintf(stderr, "envoy-agent: invalid configuration:\n%s\n", indent(ce.Error()))
		return exitStatusUnknown
	default:
		fmt.Fprintf(stderr, "envoy-agent: %v\n", err)
		return exitStatusUnknown
	}
}

// oneProcessor gives `envoy-agent run` one Go processor (GOMAXPROCS=1)
// unless the operator set GOMAXPROCS in its environment. The agent's
// goroutines mostly wait: on Envoy's admin API, its own sockets, timers and
// child processes. With a second processor idle, every goroutine that
// wakes (a watchdog ping, an answer from Envoy) also wakes an idle thread to
// look for work, which finds none: on an idle agent with a 1 s watchdog
// ping that is about a third of its context switches and a fifth of its
// CPU, and during a start it competes with Envoy for the host's cores
// (docs/design.md, section 2). Setting it also stops the Go runtime's
// once-a-second re-reading of the cgroup's CPU limit.
func oneProcessor() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
}
