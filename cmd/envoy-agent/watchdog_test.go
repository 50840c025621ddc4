//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// TestWatchdogFiringSaysWhyOnce: with Envoy wedged (SIGSTOP), the agent
// stops its pings and says why in one line at error priority, before
// systemd's deadline; systemd's WatchdogSignal (SIGABRT, the unit's) then
// stops Envoy without a drain, and the Go runtime dumps no goroutine
// stacks. The agent's stderr is a "journal stream", as under the unit, so
// every line carries its priority.
func TestWatchdogFiringSaysWhyOnce(t *testing.T) {
	t.Parallel()
	const interval = 2 * time.Second
	stderr, err := os.Create(filepath.Join(t.TempDir(), "journal"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	// A drain as long as the test's bound: the SIGABRT stop must not drain.
	p := startAgent(t, procOptions{watchdogUsec: int(interval.Microseconds()), stderrFile: stderr, env: []string{journalStream(t, stderr)},
		agent: map[string]string{"min_drain_duration": `"30s"`, "termination_drain_duration": `"30s"`}})
	read := func() []string {
		b, err := os.ReadFile(stderr.Name())
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	}
	errorLines := func() []string {
		var out []string
		for _, l := range read() {
			if m := priorityRE.FindStringSubmatch(l); m != nil && m[1] <= "3" {
				out = append(out, l)
			}
		}
		return out
	}
	live := time.Now()
	if !envoykit.Eventually(5*interval, func() bool { return p.ns.Count("WATCHDOG=1", live, time.Now()) >= 2 }) {
		t.Fatalf("no watchdog pings while Envoy answers: %v", p.ns.Messages())
	}
	if err := syscall.Kill(p.envoyPid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	if !envoykit.Eventually(5*interval, func() bool { return len(errorLines()) > 0 }) {
		t.Fatalf("no line at error priority %s after Envoy froze:\n%s", 5*interval, strings.Join(read(), "\n"))
	}
	said := time.Now()
	t.Logf("the error line came %s after SIGSTOP (WatchdogSec=%s): %s", said.Sub(frozen).Round(time.Millisecond), interval, errorLines()[0])
	if n := p.ns.Count("WATCHDOG=1", said, time.Now()); n != 0 {
		t.Errorf("%d WATCHDOG=1 after the agent said it stopped pinging", n)
	}

	// systemd's deadline: WatchdogSignal=SIGABRT.
	sent := p.signal(syscall.SIGABRT)
	code, took := p.wait(sent, 20*time.Second)
	t.Logf("the agent exited %d, %s after SIGABRT", code, took.Round(time.Millisecond))
	if code != 0 {
		t.Errorf("exit %d after SIGABRT; want 0 (systemd records the watchdog's result itself)", code)
	}
	if !envoykit.Eventually(5*time.Second, func() bool { return !envoykit.Alive(p.envoyPid) }) {
		t.Errorf("the wedged Envoy (pid %d) outlived the agent", p.envoyPid)
	}
	lines := read()
	errs := errorLines()
	if len(errs) != 1 {
		t.Errorf("%d lines at error priority or above; want one:\n%s", len(errs), strings.Join(errs, "\n"))
	}
	for _, want := range []string{fmt.Sprintf("the admin API of Envoy pid %d (epoch 0, ", p.envoyPid), "does not answer GET /ready", "no answer for ", "WatchdogSec=2s"} {
		if !strings.Contains(errs[0], want) {
			t.Errorf("the error line %q lacks %q", errs[0], want)
		}
	}
	for _, l := range lines {
		if !priorityRE.MatchString(l) {
			t.Errorf("line without a priority (a runtime dump?): %q", l)
		}
		if strings.Contains(l, "goroutine ") || strings.Contains(l, "SIGABRT: abort") {
			t.Errorf("a Go stack dump: %q", l)
		}
		if strings.Contains(l, "draining") {
			t.Errorf("the watchdog's stop drained: %q", l)
		}
	}
	if t.Failed() {
		t.Logf("agent's journal stream:\n%s", strings.Join(lines, "\n"))
	}
}
