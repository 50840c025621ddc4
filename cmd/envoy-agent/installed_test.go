//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

func TestNoticesTheInstalledEnvoyIsNotTheRunningOne(t *testing.T) {
	t.Parallel()
	real, err := os.ReadFile(envoykit.Binary(t))
	if err != nil {
		t.Fatal(err)
	}
	// binary_path is a copy of the real Envoy that the test replaces, as an
	// upgrade without a package trigger (or by hand) would.
	bin := filepath.Join(t.TempDir(), "envoy")
	if err := os.WriteFile(bin, real, 0o755); err != nil {
		t.Fatal(err)
	}
	p := startAgent(t, procOptions{envoy: map[string]string{
		"binary_path": strconv.Quote(bin), "drain_duration": `"1s"`, "parent_shutdown_duration": `"2s"`,
	}})
	if s := p.lastStatus(); strings.Contains(s, "installed Envoy") {
		t.Fatalf("STATUS= at start says %q", s)
	}
	l := envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: envoykit.URL(p.ports.Listener, "/"), Connections: 2})
	defer l.Stop()

	// The same release as a new file: a reload can switch to it.
	replaceFile(t, bin, real, 0o755)
	s := p.waitStatus(30*time.Second, "the installed Envoy "+bin, "differs from the running one: a reload switches to it with no dropped connection")
	t.Logf("replaced by the same hot-restart version: STATUS=%q", s)
	if !p.logged("differs from the running one") {
		t.Errorf("the log does not say the installed Envoy differs")
	}
	if code, out := p.reload(); code != 0 {
		t.Fatalf("reload: exit %d: %s", code, out)
	}
	// The reload's READY=1 datagram may reach the test's reader after the
	// reload's answer: wait for it.
	if s := p.waitStatus(10*time.Second, "reloaded"); strings.Contains(s, "installed Envoy") {
		t.Fatalf("STATUS= after the reload into the installed Envoy: %q", s)
	}

	// A wrapper script that execs the real Envoy: never the running
	// executable, but what binary_path held when its Envoy started, so once
	// reloaded into it nothing is reported.
	replaceFile(t, bin, []byte("#!/bin/sh\nexec "+envoykit.Binary(t)+" \"$@\"\n"), 0o755)
	p.waitStatus(30*time.Second, "differs from the running one: a reload switches to it")
	if code, out := p.reload(); code != 0 {
		t.Fatalf("reload into the wrapper: exit %d: %s", code, out)
	}
	// The reload's READY=1 datagram may reach the test's reader after the
	// reload's answer: wait for it.
	if s := p.waitStatus(10*time.Second, "reloaded"); strings.Contains(s, "installed Envoy") {
		t.Fatalf("STATUS= after the reload into a wrapper script: %q", s)
	}

	// A stand-in for an Envoy of another hot-restart version (no real one is
	// at hand: releases 1.36 to 1.40 all have 11.104): a script that answers
	// --hot-restart-version differently and --version as the real one.
	standIn := "#!/bin/sh\n[ \"$1\" = --hot-restart-version ] && { echo 10.96 >&2; exit 0; }\nexec " + envoykit.Binary(t) + " \"$@\"\n"
	replaceFile(t, bin, []byte(standIn), 0o755)
	s = p.waitStatus(30*time.Second, "hot-restart version 10.96) differs from the running one (hot-restart version 11.",
		"a restart switches to it with a drain")
	t.Logf("replaced by another hot-restart version: STATUS=%q", s)
	code, out := p.reload()
	if code != 3 || !strings.Contains(out, "hot-restart version 10.96") {
		t.Fatalf("reload onto another hot-restart version: exit %d: %s", code, out)
	}
	if s := p.waitStatus(10*time.Second, "last reload failed"); !strings.Contains(s, "a restart switches to it with a drain") {
		t.Fatalf("STATUS= after the refused reload: %q", s)
	}

	// Removed (a package removed while the agent runs).
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	s = p.waitStatus(30*time.Second, "the installed Envoy "+bin+" is gone", "the running one keeps serving")
	t.Logf("removed: STATUS=%q", s)

	envoykit.WaitAnswers(t, l, 20) // some load after the last change
	l.Stop()
	if l.Failed() != 0 || l.OK() == 0 {
		t.Fatalf("%d requests failed, %d ok (last error: %s)", l.Failed(), l.OK(), l.LastErr())
	}
}
