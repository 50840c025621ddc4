//go:build linux

package main

import (
	"bytes"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
	"github.com/envoy-agent/envoy-agent/service/manual"
)

// TestEveryDocumentedCommandExists checks service/manual (the source of help, the man pages and
// README's table) against what the command line dispatches: each documented command answers
// --help with its own usage, and help lists every one.
func TestEveryDocumentedCommandExists(t *testing.T) {
	for _, c := range manual.Commands {
		t.Run(c.Name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run([]string{c.Name, "--help"}, &stdout, &stderr)
			out := stdout.String() + stderr.String()
			if code != exitOK || strings.Contains(out, "unknown command") {
				t.Fatalf("envoy-agent %s --help: exit %d, %q", c.Name, code, out)
			}
			if c.Name != "help" && !strings.Contains(out, "Usage: envoy-agent "+c.Name) {
				t.Errorf("envoy-agent %s --help printed %q", c.Name, out)
			}
			if c.ConfigFlag && !strings.Contains(out, "-config") {
				t.Errorf("envoy-agent %s --help does not mention --config: %q", c.Name, out)
			}
			// Each switch on a line of its own, as the Ansible role looks
			// for reload's --wait and validate's --plan.
			for _, f := range c.Flags {
				if !regexp.MustCompile(`(?m)^[[:space:]]+--?` + regexp.QuoteMeta(f.Name) + `([[:space:]]|$)`).MatchString(out) {
					t.Errorf("envoy-agent %s --help does not list --%s as the role looks for it: %q", c.Name, f.Name, out)
				}
			}
		})
	}
	var stdout bytes.Buffer
	run([]string{"help"}, &stdout, &stdout)
	if stdout.String() != manual.Usage() {
		t.Errorf("help printed %q, want manual.Usage()", stdout.String())
	}
}

// TestReopenLogsWithoutAnAgent: reopen-logs when no agent listens (logrotate on a stopped unit is
// guarded by is-active, but by hand it must say what is wrong) exits 1 with the reason.
func TestReopenLogsWithoutAnAgent(t *testing.T) {
	config := filepath.Join(t.TempDir(), "config.toml")
	writeFile(t, config, "[agent]\nstatus_port = "+strconv.Itoa(envoykit.FreePort(t))+"\n")
	code, stdout, stderr := runAgent(t, "reopen-logs", "--config", config)
	if code != exitFailure || !strings.Contains(stderr, "cannot reach the agent") {
		t.Fatalf("exit %d, %q %q; want exit 1 naming the unreachable agent", code, stdout, stderr)
	}
}
