package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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
