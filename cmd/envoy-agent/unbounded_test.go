//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envoy-agent/envoy-agent/internal/testenvoy"
)

// TestFIFOInPlaceOfAFileNeverHangs: a FIFO as --config or as config_path
// used to hang validate, run and reload (and a reload stuck on it made
// SIGTERM wait forever). With the real Envoy: each is refused at once, the
// serving Envoy keeps serving, and a stop still drains and exits 0.
func TestFIFOInPlaceOfAFileNeverHangs(t *testing.T) {
	p := startAgent(t, procOptions{})
	fifo := filepath.Join(p.dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"validate", "run"} {
		code, _, stderr := runAgent(t, cmd, "--config", fifo)
		if code != 3 || !strings.Contains(stderr, "is not a regular file (a FIFO)") {
			t.Fatalf("%s --config FIFO: exit %d, want 3 naming the FIFO:\n%s", cmd, code, stderr)
		}
	}
	bootstrap := filepath.Join(p.dir, "envoy.yaml")
	if err := os.Rename(bootstrap, bootstrap+".good"); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(bootstrap, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := p.reload()
	if code != 3 || !strings.Contains(out, "envoy.config_path") || !strings.Contains(out, "not a regular file") {
		t.Fatalf("reload with a FIFO bootstrap: exit %d, want 3 naming envoy.config_path: %s", code, out)
	}
	if code, _, stderr := runAgent(t, "validate", "--config", p.config); code != 3 || !strings.Contains(stderr, "not a regular file") {
		t.Fatalf("validate with a FIFO bootstrap: exit %d: %s", code, stderr)
	}
	if err := os.Rename(p.config, p.config+".good"); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(p.config, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := p.reload(); code == 0 {
		t.Fatalf("reload with a FIFO configuration: exit 0: %s", out)
	}
	if p.healthz() != 200 {
		t.Fatal("the serving Envoy is not ready after the refused reloads")
	}
	if code, took := p.wait(p.signal(syscall.SIGTERM), 60*time.Second); code != 0 {
		t.Fatalf("stop after the refused reloads: exit %d after %s", code, took)
	}
}

// TestStopWaitsOnAHungReloadAtMostStartTimeout: a reload that hangs holds a
// stop for start_timeout at most. The hang comes from a stand-in for the
// Envoy binary that never answers --version (a real Envoy answers at once;
// a wedged binary or file system is what this stands for).
func TestStopWaitsOnAHungReloadAtMostStartTimeout(t *testing.T) {
	p := startAgent(t, procOptions{agent: map[string]string{"start_timeout": `"3s"`, "termination_drain_duration": `"2s"`}})
	hung := filepath.Join(p.dir, "hung-envoy")
	pidFile := filepath.Join(p.dir, "hung.pid")
	writeFile(t, hung, "#!/bin/sh\necho $$ > "+pidFile+"\nexec sleep 120\n")
	if err := os.Chmod(hung, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	config := readFileT(t, p.config)
	writeFile(t, p.config, strings.Replace(config, "binary_path = ", "binary_path = "+strconv.Quote(hung)+"\n# was: binary_path = ", 1))
	p.signal(syscall.SIGHUP)
	if !testenvoy.Eventually(30*time.Second, func() bool { _, err := os.Stat(pidFile); return err == nil }) {
		t.Fatal("the reload never ran the stand-in binary")
	}
	sent := p.signal(syscall.SIGTERM)
	code, took := p.wait(sent, 25*time.Second)
	if code != 0 || !strings.Contains(p.stderr.String(), "the reload under way did not end within start_timeout (3s); stopping anyway") {
		t.Fatalf("stop during a hung reload: exit %d after %s; want 0 after start_timeout and the drain:\n%s", code, took, p.stderr)
	}
	// start_timeout 3s, then a drain of at most 2s and Envoy's quit; the
	// hung --version alone would have held it 30s.
	if took > 20*time.Second {
		t.Fatalf("the stop took %s", took)
	}
	assertNoEnvoyFor(t, p.dir)
}
