//go:build linux

package main

// Several agents on one host, and `envoy-agent status`: each test runs real
// agents with the real Envoy, each with its own base id (random), ports and
// hot-restart socket directory (its run_dir), so they run beside any other.

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/service/control"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// TestTwoAgentsClash gives a second agent the base_id, or the admin port,
// of one that runs: it must refuse to start (exit 3, nothing started) with
// an error naming the running one's configuration and the key to change,
// and the running one must keep serving.
func TestTwoAgentsClash(t *testing.T) {
	t.Parallel()
	baseID := envoykit.BaseID()
	first := startAgent(t, procOptions{envoy: map[string]string{"base_id": fmt.Sprint(baseID)}})
	tests := []struct {
		name    string
		opts    func() procOptions
		key     string
		message string
	}{
		{"same base_id", func() procOptions {
			return procOptions{noWaitReady: true, envoy: map[string]string{"base_id": fmt.Sprint(baseID)}}
		}, "envoy.base_id", fmt.Sprintf("base_id %d is already used by the envoy-agent running with %s (pid %d)", baseID, first.config, first.proc.Pid())},
		{"same admin port", func() procOptions {
			ports := envoykit.NewPorts(t)
			ports.Admin = first.ports.Admin
			return procOptions{noWaitReady: true, envoy: map[string]string{"admin_port": strconv.Itoa(first.ports.Admin)},
				bootstrapFile: envoykit.WriteBootstrap(t, t.TempDir(), "envoy.yaml", envoykit.BootstrapOptions{Ports: ports})}
		}, "envoy.admin_port", fmt.Sprintf("port %d (Envoy's admin) is already used by the envoy-agent running with %s (pid %d)", first.ports.Admin, first.config, first.proc.Pid())},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			second := startAgent(t, tt.opts())
			code, _ := second.wait(second.started, 30*time.Second)
			out := second.stderr.String()
			if code != 3 || !strings.Contains(out, tt.message) || !strings.Contains(out, second.config+":") || !strings.Contains(out, ": "+tt.key+": ") {
				t.Fatalf("second agent exited %d, want 3 naming %s and %q:\n%s", code, tt.key, tt.message, out)
			}
			t.Logf("the second agent's error:\n%s", out)
			assertNoEnvoyFor(t, second.dir)
			if first.healthz() != 200 || !envoykit.Alive(first.envoyPid) {
				t.Fatalf("the first agent stopped serving")
			}
		})
	}
}

// TestBaseIDHeldByABareEnvoy: an Envoy that no agent runs holds the base id
// (it maps the base id's shared memory); the agent refuses before starting
// its own Envoy, as a run-time failure (exit 1: systemd retries, and the
// other Envoy may be gone by then) naming the pid and uid that map the
// region, not as a configuration error.
func TestBaseIDHeldByABareEnvoy(t *testing.T) {
	t.Parallel()
	baseID := envoykit.BaseID()
	ports := envoykit.NewPorts(t)
	bare, err := envoykit.StartEnvoy(envoykit.Binary(t), envoykit.WriteBootstrap(t, t.TempDir(), "bare.yaml", envoykit.BootstrapOptions{Ports: ports}), baseID, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bare.Kill)
	if err := bare.WaitReady(ports.Admin, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	p := startAgent(t, procOptions{noWaitReady: true, envoy: map[string]string{"base_id": fmt.Sprint(baseID)}})
	code, _ := p.wait(p.started, 30*time.Second)
	want := fmt.Sprintf("(Envoy's hot-restart shared memory for base_id %d) is mapped by pid %d (envoy, uid %d)", baseID, bare.Pid(), os.Geteuid())
	if code != 1 || !strings.Contains(p.stderr.String(), want) {
		t.Fatalf("exit %d, want 1 with %q:\n%s", code, want, p.stderr)
	}
	assertNoEnvoyFor(t, p.dir)
}

// TestStartHintBesideEnvoysError: a listener port taken at start; Envoy's
// own line is followed by what to change.
func TestStartHintBesideEnvoysError(t *testing.T) {
	t.Parallel()
	var ln net.Listener
	p := startAgentWith(t, procOptions{noWaitReady: true}, func(ports envoykit.Ports) {
		var err error
		if ln, err = net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(ports.Listener)); err != nil {
			t.Fatal(err)
		}
	})
	defer ln.Close()
	code, _ := p.wait(p.started, 30*time.Second)
	out := p.stderr.String()
	envoyLine := fmt.Sprintf("cannot bind '127.0.0.1:%d': Address already in use\n  -> 127.0.0.1:%d", p.ports.Listener, p.ports.Listener)
	if code != 1 || !strings.Contains(out, envoyLine) || !strings.Contains(out, "is in use by another process: change that listener's port in ") {
		t.Fatalf("exit %d, want 1 with Envoy's line followed by a hint:\n%s", code, out)
	}
}

func (p *agentProc) status(t *testing.T) (int, control.StatusReport, string) {
	t.Helper()
	code, stdout, stderr := runAgent(t, "status", "--config", p.config, "--json")
	var rep control.StatusReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("status --json exit %d: not JSON (%v):\n%s%s", code, err, stdout, stderr)
	}
	return code, rep, stdout
}

// TestStatusFollowsTheAgent checks `envoy-agent status --json` against what
// the test does: a start, a reload (two epochs), a failed reload, a drain,
// the exit.
func TestStatusFollowsTheAgent(t *testing.T) {
	t.Parallel()
	p := startAgent(t, procOptions{agent: map[string]string{"termination_drain_duration": `"30s"`, "min_drain_duration": `"30s"`}})
	code, rep, out := p.status(t)
	if code != 0 || rep.SchemaVersion != 1 || rep.State != "live" || len(rep.Epochs) != 1 || rep.Epochs[0].Pid != p.envoyPid ||
		rep.Epochs[0].Role != "serving" || rep.Envoy == nil || rep.Envoy.HotRestartVersion == "" || !strings.Contains(rep.Envoy.Version, "/1.") ||
		rep.LastReload != nil || rep.Agent.Pid != p.proc.Pid() || rep.Agent.Config != p.config {
		t.Fatalf("status after the start (exit %d):\n%s", code, out)
	}
	listener := fmt.Sprintf("127.0.0.1:%d", p.ports.Listener)
	if len(rep.Envoy.Listeners) != 1 || rep.Envoy.Listeners[0].Address != listener || rep.Envoy.ActiveConnections == nil {
		t.Fatalf("want the listener on %s and a connection count:\n%s", listener, out)
	}
	if f := rep.Files; f == nil || f.State != control.FilesInSync || f.Config.Path != p.config || f.Bootstrap.SHA256 == "" ||
		f.Bootstrap.SHA256 != f.Bootstrap.ServedSHA256 || p.metric("envoy_agent_config_drift_files") != "0" {
		t.Fatalf("files after the start, drift metric %q:\n%s", p.metric("envoy_agent_config_drift_files"), out)
	}
	_, text, _ := runAgent(t, "status", "--config", p.config)
	if !strings.Contains(text, ": live (") || !strings.Contains(text, fmt.Sprintf("epoch 0, pid %d, serving", p.envoyPid)) ||
		!strings.Contains(text, "  files:        as Envoy serves them (taken ") {
		t.Fatalf("text status:\n%s", text)
	}
	// An edit not reloaded yet: the files differ, and say so.
	bootstrap := filepath.Join(p.dir, "envoy.yaml")
	served, err := os.ReadFile(bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, bootstrap, string(served)+"# an edit\n")
	_, rep, out = p.status(t)
	if f := rep.Files; f == nil || f.State != control.FilesDiffer || !f.Bootstrap.Differs || f.Config.Differs || !strings.Contains(f.Reason, "not reloaded yet") ||
		p.metric("envoy_agent_config_drift_files") != "1" || p.metric("envoy_agent_reload_rollbacks_total") != "0" {
		t.Fatalf("files after an edit, drift metric %q:\n%s", p.metric("envoy_agent_config_drift_files"), out)
	}

	if code, out := p.reload(); code != 0 {
		t.Fatalf("reload: exit %d: %s", code, out)
	}
	code, rep, out = p.status(t)
	if code != 0 || rep.State != "live" || len(rep.Epochs) != 2 || rep.Epochs[0].Epoch != 1 || rep.Epochs[0].Role != "serving" ||
		rep.Epochs[1].Pid != p.envoyPid || rep.Epochs[1].Role != "draining" || rep.Epochs[1].DrainEndsInSeconds == nil ||
		rep.Envoy.ServingEpoch != 1 || rep.LastReload == nil || !rep.LastReload.OK || rep.LastReload.Epoch != 1 || rep.Reloads.OK != 1 ||
		rep.LastReload.Outcome != control.OutcomeOK || rep.Files == nil || rep.Files.State != control.FilesInSync {
		t.Fatalf("status after a reload (exit %d):\n%s", code, out)
	}
	writeFile(t, bootstrap, "static_resources: {listeners: [{name: broken}]\n")
	if code, _ := p.reload(); code == 0 {
		t.Fatal("a reload of an invalid bootstrap succeeded")
	}
	_, rep, out = p.status(t)
	if rep.LastReload == nil || rep.LastReload.OK || rep.LastReload.Error == "" || rep.Reloads.Failed != 1 || rep.Envoy.ServingEpoch != 1 ||
		rep.LastReload.Outcome != control.OutcomeFailed {
		t.Fatalf("status after a failed reload:\n%s", out)
	}
	// The refused files are not what Envoy serves, and the status says why.
	if f := rep.Files; f == nil || f.State != control.FilesDiffer || !strings.Contains(f.Reason, "the reload of these files at "+rep.LastReload.At+" failed: ") ||
		p.metric("envoy_agent_config_drift_files") != "1" {
		t.Fatalf("files after a refused reload:\n%s", out)
	}
	_, text, _ = runAgent(t, "status", "--config", p.config)
	if !strings.Contains(text, "  files:        "+bootstrap+" NOT what Envoy serves: the reload of these files at ") {
		t.Fatalf("text status after a refused reload:\n%s", text)
	}

	p.signal(syscall.SIGTERM)
	if !envoykit.Eventually(10*time.Second, func() bool {
		_, rep, _ = p.status(t)
		return rep.State == "draining" && rep.Drain != nil && rep.Drain.ElapsedSeconds > 0
	}) {
		t.Fatalf("no draining state with progress during the stop: %+v", rep)
	}
	if rep.Drain.Kind != "stop" || rep.Drain.Done || rep.Drain.RemainingSeconds <= 0 {
		t.Fatalf("drain: %+v", *rep.Drain)
	}
	p.signal(syscall.SIGTERM) // ends the drain at once
	p.wait(time.Now(), 20*time.Second)
	code, rep, out = p.status(t)
	if code != 3 || rep.State != "stopped" || rep.Error == "" {
		t.Fatalf("status of a stopped agent (exit %d):\n%s", code, out)
	}
}
