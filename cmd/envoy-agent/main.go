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

	"github.com/envoy-agent/envoy-agent/envoy"
	"github.com/envoy-agent/envoy-agent/service"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// Exit codes, documented in README.md.
const (
	exitOK        = 0
	exitFailure   = 1 // Envoy exited by itself, was never LIVE, or the agent failed
	exitUsage     = 2 // the command line is wrong
	exitBadConfig = 3 // the configuration is invalid; nothing was started
	exitFallback  = 4 // upgrade: the running agent cannot hand over; restart the unit to switch
)

const defaultConfig = "/etc/envoy-agent/config.toml"

const usage = `envoy-agent supervises one Envoy under systemd.

Usage:
  envoy-agent run      [--config FILE]   start Envoy, notify systemd, drain on SIGTERM
  envoy-agent validate [--config FILE]   check the configuration and Envoy's bootstrap
  envoy-agent reload   [--config FILE]   make the running agent apply its edited files
  envoy-agent upgrade  [--config FILE]   make the running agent re-execute the installed binary, Envoy kept
  envoy-agent version                    print the version
  envoy-agent help                       print this help

Run "envoy-agent COMMAND --help" for a command's flags.
The default configuration file is ` + defaultConfig + `.
`

// The main goroutine stays on the main thread: it is the thread that forks
// every Envoy and re-executes the agent on an upgrade (envoy/forker.go).
func init() { runtime.LockOSThread() }

func main() {
	os.Exit(envoy.ServeForkerOnMainThread(func() int { return run(os.Args[1:], os.Stdout, os.Stderr) }))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "run":
		path, code := configFlag("run", "Start Envoy with the configuration, tell systemd when it is LIVE, and drain it on SIGTERM.", rest, stdout, stderr)
		if code >= 0 {
			return code
		}
		return exitCode(service.Run(context.Background(), service.Options{ConfigPath: path, Version: version, Stderr: stderr}), stderr)
	case "validate":
		path, code := configFlag("validate", "Check the configuration file and have Envoy validate its bootstrap (envoy --mode validate).", rest, stdout, stderr)
		if code >= 0 {
			return code
		}
		return exitCode(service.Validate(context.Background(), path, stdout), stderr)
	case "reload":
		path, code := configFlag("reload", "Ask the agent running with this configuration to re-read it and hot restart Envoy;\nwait for the outcome. The serving Envoy keeps serving if the reload fails.", rest, stdout, stderr)
		if code >= 0 {
			return code
		}
		return exitCode(service.RequestReload(context.Background(), path, stdout), stderr)
	case "upgrade":
		path, code := configFlag("upgrade", "Ask the agent running with this configuration to re-execute its binary (the one installed now),\nhanding the running Envoy over with no request dropped; wait until the new agent serves.\nExits 4 when the running agent cannot hand over (it predates live upgrades): restart the unit then.", rest, stdout, stderr)
		if code >= 0 {
			return code
		}
		err := service.RequestUpgrade(context.Background(), path, stdout)
		var fe *service.FallbackError
		if errors.As(err, &fe) {
			fmt.Fprintf(stderr, "envoy-agent: %v\n", err)
			return exitFallback
		}
		return exitCode(err, stderr)
	case "version":
		fs := flag.NewFlagSet("version", flag.ContinueOnError)
		fs.SetOutput(stderr)
		handover := fs.Bool("handover", false, "also print the handover state versions this binary reads (for live upgrades)")
		fs.Usage = func() {
			fmt.Fprintln(fs.Output(), "Usage: envoy-agent version [--handover]\n\nPrint envoy-agent's version.\n\nFlags:")
			fs.PrintDefaults()
		}
		if err := fs.Parse(rest); err != nil {
			return helpOrUsage(err)
		}
		if *handover {
			fmt.Fprint(stdout, service.HandoverVersionText(version))
			return exitOK
		}
		fmt.Fprintf(stdout, "envoy-agent %s\n", version)
		return exitOK
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "envoy-agent: unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}
}

// configFlag parses a command's flags: --config FILE. code is -1 to go on.
func configFlag(name, what string, args []string, stdout, stderr io.Writer) (path string, code int) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&path, "config", defaultConfig, "the agent's TOML configuration `file`")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: envoy-agent %s [--config FILE]\n\n%s\n\nFlags:\n", name, what)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return "", exitOK
		}
		return "", exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "envoy-agent %s: unexpected argument %q\n", name, fs.Arg(0))
		return "", exitUsage
	}
	return path, -1
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
	var ce *service.ConfigError
	if errors.As(err, &ce) {
		fmt.Fprintf(stderr, "envoy-agent: invalid configuration:\n%s\n", indent(ce.Error()))
		return exitBadConfig
	}
	if service.IsConfigReloadError(err) {
		fmt.Fprintf(stderr, "envoy-agent: %v\n", err)
		return exitBadConfig
	}
	var ae *envoy.AdminAddressError
	if errors.As(err, &ae) {
		fmt.Fprintf(stderr, "envoy-agent: invalid configuration: %v\n", err)
		return exitBadConfig
	}
	fmt.Fprintf(stderr, "envoy-agent: %v\n", err)
	return exitFailure
}

func indent(s string) string { return "  " + strings.ReplaceAll(s, "\n", "\n  ") }
