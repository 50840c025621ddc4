//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/testenvoy"
)

// TestUpgradeFaultsOfTheNewBinary: the faults of a new binary that a real
// agent cannot show, each played by a stand-in shell script (named as such)
// installed where the agent's binary is, with the real Envoy serving a
// non-retrying load throughout:
//
//   - a probe that hangs and leaves a child holding its output: refused at
//     the probe's 10 s bound (it took 100 s, until the child exited);
//   - a binary that passes the probe and then exits 1, or hangs then
//     exits, at what follows (the state it is handed): it is asked to read
//     that state before the exec (version --handover-check), so it fails
//     there, with Envoy still the old agent's (Envoy died, 2,272 of 2,822
//     requests failed, and the upgrade command waited 40 s);
//   - the file replaced between the probe and the exec (the stand-in, when
//     probed, renames a truncated copy of the agent over the installed
//     path): the file probed is the file executed, so the upgrade goes
//     through to the real new agent (it was a SIGSEGV and Envoy died).
//
// Each: 0 failed requests, the same agent pid and Envoy.
func TestUpgradeFaultsOfTheNewBinary(t *testing.T) {
	t.Parallel()
	binA, binB := buildVersion(t, "1.0.0-a"), buildVersion(t, "1.0.1-b")
	installed := filepath.Join(t.TempDir(), "envoy-agent")
	install(t, binA, installed)
	p := startAgent(t, procOptions{binary: installed, envoy: quickDrain})
	agentPid, envoyPid := p.proc.Pid(), p.envoyPid
	load := testenvoy.StartRawLoad(fmt.Sprintf("127.0.0.1:%d", p.ports.Listener), testenvoy.LoadSpec{Path: "/", Workers: 2})
	defer load.Stop()
	if !testenvoy.Eventually(10*time.Second, func() bool { return load.Now().OK > 50 }) {
		t.Fatalf("no load through Envoy: %s", load.Now())
	}

	standIn := func(script string) string {
		f := filepath.Join(t.TempDir(), "stand-in-envoy-agent")
		if err := os.WriteFile(f, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		return f
	}
	// A truncated copy of the real agent: an ELF that the kernel maps and
	// that crashes when run.
	whole, err := os.ReadFile(binB)
	if err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(t.TempDir(), "truncated")
	if err := os.WriteFile(truncated, whole[:len(whole)/3], 0o755); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name, script string
		wantCode     int
		want         string
		bound        time.Duration // loose: the figure is logged
		version      string        // serving afterwards
	}{
		{
			name: "probe hangs with a child holding its output",
			script: "#!/bin/sh\n# stand-in: a new binary whose probe hangs\n" +
				"if [ \"$1\" = version ]; then sleep 300 & sleep 300; fi\nexec " + binB + " \"$@\"\n",
			wantCode: 1, want: "did not answer within 10s", bound: 40 * time.Second, version: "1.0.0-a",
		},
		{
			// Answers the probe as the real new agent does, and exits 1 at
			// anything else: after the exec, at the state it is handed.
			name: "passes the probe, exits 1 after it",
			script: "#!/bin/sh\n# stand-in: a new binary that passes the probe and fails at the state\n" +
				"if [ \"$1 $2\" = \"version --handover\" ]; then exec " + binB + " \"$@\"; fi\necho cannot adopt >&2\nexit 1\n",
			wantCode: 1, want: "cannot take over: `version --handover-check`: exit status 1: cannot adopt", bound: 40 * time.Second, version: "1.0.0-a",
		},
		{
			name: "passes the probe, hangs after it, then exits",
			script: "#!/bin/sh\n# stand-in: a new binary that passes the probe and hangs at the state\n" +
				"if [ \"$1 $2\" = \"version --handover\" ]; then exec " + binB + " \"$@\"; fi\nsleep 30\nexit 1\n",
			wantCode: 1, want: "`version --handover-check` did not answer within 10s", bound: 40 * time.Second, version: "1.0.0-a",
		},
		{
			name: "file replaced between the probe and the exec",
			script: "#!/bin/sh\n# stand-in: the path is replaced right after the probe\n" +
				"if [ \"$1\" = version ]; then cp " + truncated + " " + installed + ".new && mv " + installed + ".new " + installed + "; fi\n" +
				"exec " + binB + " \"$@\"\n",
			wantCode: 0, want: "-> 1.0.1-b in pid " + fmt.Sprint(agentPid), bound: 60 * time.Second, version: "1.0.1-b",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			install(t, standIn(tt.script), installed)
			start := time.Now()
			code, out := runBinary(t, binB, "upgrade", "--config", p.config)
			took := time.Since(start)
			t.Logf("envoy-agent upgrade: exit %d after %s: %s", code, took.Round(time.Millisecond), strings.TrimSpace(out))
			if code != tt.wantCode || !strings.Contains(out, tt.want) {
				t.Fatalf("upgrade: exit %d, want %d saying %q: %s", code, tt.wantCode, tt.want, out)
			}
			if took > tt.bound {
				t.Errorf("upgrade took %s, over the %s bound", took, tt.bound)
			}
			info := p.upgradeInfo()
			if info["version"] != tt.version || int(info["pid"].(float64)) != agentPid || int(info["envoy_pid"].(float64)) != envoyPid || info["live"] != true {
				t.Fatalf("after the upgrade: %v; want %s in pid %d serving Envoy pid %d", info, tt.version, agentPid, envoyPid)
			}
		})
	}
	o := load.Stop()
	t.Logf("load across the faults: %s", o)
	if o.Failed != 0 || o.OK == 0 {
		t.Fatalf("load: %s: %v", o, o.Errors)
	}
}
