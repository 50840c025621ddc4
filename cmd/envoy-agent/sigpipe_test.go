//go:build linux

package main

import (
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// TestStderrReaderGone: the reader of the agent's stderr goes away (as when
// journald restarts); the agent and Envoy live on, log writes fail quietly,
// a reload works and a stop drains and exits 0. The agent catches SIGPIPE
// rather than ignoring it, so Envoy starts with SIGPIPE's default
// disposition, as it would unsupervised.
func TestStderrReaderGone(t *testing.T) {
	t.Parallel()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	copied := make(chan struct{})
	var early envoykit.SyncBuffer
	go func() { _, _ = io.Copy(&early, r); close(copied) }()
	p := startAgent(t, procOptions{stderrFile: w})
	w.Close()
	if sigMask(t, p.proc.Pid(), "SigCgt")&(1<<(syscall.SIGPIPE-1)) == 0 {
		t.Errorf("the agent does not catch SIGPIPE")
	}
	// Not ignored: an ignored signal stays ignored through exec. (Envoy 1.40
	// ignores SIGPIPE itself: a bare Envoy's SigIgn has it; that is its own
	// choice to make.)
	if sigMask(t, p.proc.Pid(), "SigIgn")&(1<<(syscall.SIGPIPE-1)) != 0 {
		t.Errorf("the agent ignores SIGPIPE, which its children inherit")
	}
	r.Close() // the journal goes away
	<-copied

	// A reload makes the agent and Envoy write to the broken pipe.
	if code, out := p.reload(); code != 0 || !strings.Contains(out, "reloaded: epoch 1") {
		t.Fatalf("reload with no stderr reader: exit %d: %s", code, out)
	}
	for range 20 {
		if r, err := envoykit.Get(envoykit.URL(p.ports.Listener, "/"), 5*time.Second); err != nil || r.Code != 200 {
			t.Fatalf("traffic with no stderr reader: %+v, %v", r, err)
		}
	}
	if code := p.healthz(); code != 200 {
		t.Fatalf("/healthz/ready = %d with no stderr reader", code)
	}
	sent := p.signal(syscall.SIGTERM)
	if code, _ := p.wait(sent, 20*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM with no stderr reader, want 0 (a drained stop); its log before the pipe broke:\n%s", code, early.String())
	}
}

// sigMask reads one signal mask (SigCgt, SigIgn) of pid.
func sigMask(t *testing.T, pid int, field string) uint64 {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// TestStderrReaderGoneExitStatus: with no reader of its stderr, an agent
// whose Envoy is killed still exits 1 (for Restart=on-failure), not by
// SIGPIPE while it prints the reason.
func TestStderrReaderGoneExitStatus(t *testing.T) {
	t.Parallel()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, r) }()
	p := startAgent(t, procOptions{stderrFile: w})
	w.Close()
	r.Close()
	if err := syscall.Kill(p.envoyPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code, _ := p.wait(time.Now(), 20*time.Second); code != 1 {
		t.Fatalf("exit %d (-1 is death by a signal: %v), want 1", code, p.proc.State())
	}
}
