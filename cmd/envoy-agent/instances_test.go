//go:build linux

package main

// Several agents on one host, and `envoy-agent status`: each test runs real
// agents with the real Envoy, each with its own base id (random), ports and
// hot-restart socket directory (its run_dir), so they run beside any other.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
	"github.com/envoy-agent/envoy-agent/service/claims"
	"github.com/envoy-agent/envoy-agent/service/control"
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

// The claims (base id, ports) as a local attacker meets them: uid 65534
// squats the abstract names the agent used to claim them through, answering
// with a made-up agent, and tries to put a claim file of its own in the
// claims directory.

// claimSquat is the helper "squat": it binds each abstract name of NAMES
// (comma-separated) and answers every connection with a made-up agent,
// creates CLAIM (a claim file) if it can, prints one line for each, then
// "squatting" and holds everything until its stdin closes.
func claimSquat() {
	// DGRAM_NAMES: abstract datagram names bound as Envoy binds its default
	// hot-restart sockets (padded with NULs to the whole sun_path).
	for _, name := range strings.Split(os.Getenv("DGRAM_NAMES"), ",") {
		if name == "" {
			continue
		}
		fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_DGRAM, 0)
		if err == nil {
			err = syscall.Bind(fd, &syscall.SockaddrUnix{Name: "@" + name + strings.Repeat("\x00", 107-len(name))})
		}
		fmt.Printf("bind dgram @%s: %s\n", name, errText(err))
	}
	for _, name := range strings.Split(os.Getenv("NAMES"), ",") {
		if name == "" {
			continue
		}
		ln, err := net.Listen("unix", name)
		fmt.Printf("bind %s: %s\n", name, errText(err))
		if err != nil {
			continue
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				fmt.Fprintln(c, `{"pid":1,"config":"/etc/envoy-agent/edge.toml","instance":"edge"}`)
				c.Close()
			}
		}()
	}
	if os.Getenv("CLAIM") == "" {
		fmt.Println("squatting")
		_, _ = bufio.NewReader(os.Stdin).ReadString(0)
		return
	}
	f, err := os.OpenFile(os.Getenv("CLAIM"), os.O_RDWR|os.O_CREATE, 0o666)
	fmt.Printf("create claim file: %s\n", errText(err))
	if err == nil {
		fmt.Fprintln(f, `{"pid":1,"config":"/etc/envoy-agent/edge.toml","instance":"edge"}`)
	}
	fmt.Println("squatting")
	_, _ = bufio.NewReader(os.Stdin).ReadString(0)
}

// TestClaimsCannotBeSquatted: with uid 65534 holding the old abstract claim
// names of a base id and its ports (answering as a made-up agent) and
// trying to write a claim file, an agent with that base id starts and
// serves; a second agent with the same base id is refused, naming the real
// first agent, not the made-up one.
func TestClaimsCannotBeSquatted(t *testing.T) {
	baseID := envoykit.BaseID()
	claimsDir := os.Getenv(claims.EnvDir)
	names := fmt.Sprintf("@envoy-agent/base-id/%d", baseID)
	_, said, _ := startHelper(t, "squat", "squatting", "NAMES="+names, "CLAIM="+filepath.Join(claimsDir, fmt.Sprintf("base-id-%d", baseID)))
	t.Logf("the squatter (uid 65534):\n%s", said)
	if !strings.Contains(said, "bind "+names+": ok") {
		t.Fatalf("the squatter could not bind the abstract name; the test proves nothing:\n%s", said)
	}
	if !strings.Contains(said, "create claim file: errno 13") {
		t.Fatalf("uid 65534 could write in the claims directory %s:\n%s", claimsDir, said)
	}

	first := startAgent(t, procOptions{envoy: map[string]string{"base_id": fmt.Sprint(baseID)}})
	if first.healthz() != 200 {
		t.Fatalf("the agent under the squat is not ready")
	}
	second := startAgent(t, procOptions{noWaitReady: true, envoy: map[string]string{"base_id": fmt.Sprint(baseID)}})
	code, _ := second.wait(second.started, 30*time.Second)
	out := second.stderr.String()
	want := fmt.Sprintf("base_id %d is already used by the envoy-agent running with %s (pid %d)", baseID, first.config, first.proc.Pid())
	if code != 3 || !strings.Contains(out, want) || strings.Contains(out, "edge") {
		t.Fatalf("second agent exited %d, want 3 naming the first agent (%q), not the squatter's:\n%s", code, want, out)
	}
}

// TestSquattedHotRestartNamesDoNotStopAStart: uid 65534 binds the abstract
// names an Envoy run without --socket-path binds for the agent's base id
// (@envoy_domain_socket_parent_N, _child_N, padded as Envoy pads them), one
// python line away for any local user. The agent's Envoy uses --socket-path,
// so the names prove nothing: the agent starts and serves. (It once exited 3,
// "base_id N is already used by an Envoy on this host that no envoy-agent
// runs", and the unit's RestartPreventExitStatus=3 kept it down for good.)
func TestSquattedHotRestartNamesDoNotStopAStart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the squatter runs as uid 65534")
	}
	t.Parallel()
	baseID := envoykit.BaseID()
	var names []string
	for n := range uint64(10) {
		for _, role := range []string{"parent", "child"} {
			names = append(names, fmt.Sprintf("envoy_domain_socket_%s_%d", role, uint64(baseID)*10+n))
		}
	}
	_, said, _ := startHelper(t, "squat", "squatting", "DGRAM_NAMES="+strings.Join(names, ","))
	if !strings.Contains(said, "bind dgram @"+names[0]+": ok") {
		t.Fatalf("uid 65534 could not bind the abstract names; the test proves nothing:\n%s", said)
	}
	p := startAgent(t, procOptions{noWaitReady: true, envoy: map[string]string{"base_id": fmt.Sprint(baseID)}})
	if !envoykit.Eventually(30*time.Second, func() bool { return p.healthz() == 200 }) {
		code, _ := p.wait(p.started, 5*time.Second)
		t.Fatalf("with uid 65534 holding @%s, the agent is not ready (exit %d):\n%s", names[0], code, p.stderr.String())
	}
	t.Logf("uid 65534 holds %d abstract hot-restart names of base_id %d; the agent serves", len(names), baseID)
}

// TestSquattedClaimsDirDoesNotStopAStart: an agent run by an ordinary user
// (uid 65533, no $XDG_RUNTIME_DIR) kept its claims in
// envoy-agent-claims-65533 in the temporary directory, which uid 65534 made
// first (mode 0777): the start failed ("claims directory ... is writable by
// its group or by others", later "belongs to uid 65534"). Now the agent
// never looks in the temporary folder: it keeps its claims in its own cache
// folder and serves; with a home of /nonexistent (the packaged user's) and
// no folder of its own, it refuses to start (exit 3) naming the folders it
// tried and ENVOY_AGENT_CLAIMS_DIR, and uid 65534's folder plays no part.
func TestSquattedClaimsDirDoesNotStopAStart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the agent runs as uid 65533 and the squatter as uid 65534")
	}
	t.Parallel()
	const agentUid = 65533
	home := shortTempDir(t)
	if err := os.Chmod(home, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(home, "tmp") // a shared, sticky temporary directory
	if err := os.Mkdir(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmp, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	squatted := filepath.Join(tmp, fmt.Sprintf("envoy-agent-claims-%d", agentUid))
	mk := exec.Command("sh", "-c", "umask 0; mkdir "+squatted)
	mk.SysProcAttr = &syscall.SysProcAttr{Credential: nobody}
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("uid 65534 could not make %s: %v %s", squatted, err, out)
	}
	for _, d := range []string{"run", "home"} {
		if err := os.Mkdir(filepath.Join(home, d), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(filepath.Join(home, d), agentUid, agentUid); err != nil {
			t.Fatal(err)
		}
	}
	p := startAgent(t, procOptions{noWaitReady: true, cred: &syscall.Credential{Uid: agentUid, Gid: agentUid},
		agent: map[string]string{"run_dir": strconv.Quote(filepath.Join(home, "run"))},
		env: []string{claims.EnvDir + "=", "XDG_RUNTIME_DIR=", "XDG_CACHE_HOME=", "STATE_DIRECTORY=",
			"TMPDIR=" + tmp, "HOME=" + filepath.Join(home, "home")}})
	if !envoykit.Eventually(30*time.Second, func() bool { return p.healthz() == 200 }) {
		code, _ := p.wait(p.started, 5*time.Second)
		t.Fatalf("with uid 65534's %s (mode 0777), the agent of uid %d is not ready (exit %d):\n%s", squatted, agentUid, code, p.stderr.String())
	}
	kept := filepath.Join(home, "home", ".cache", "envoy-agent-claims")
	if _, err := os.Stat(filepath.Join(kept, fmt.Sprintf("base-id-%d", configBaseID(t, p.config)))); err != nil {
		t.Fatalf("the base id claim is not in %s: %v", kept, err)
	}
	t.Logf("uid 65534 squats %s; the agent keeps its claims in %s and serves", squatted, kept)
	p.wait(p.signal(syscall.SIGTERM), 30*time.Second)

	// The packaged user's home, /nonexistent: no cache folder either.
	p = startAgent(t, procOptions{noWaitReady: true, cred: &syscall.Credential{Uid: agentUid, Gid: agentUid},
		agent: map[string]string{"run_dir": strconv.Quote(filepath.Join(home, "run"))},
		env: []string{claims.EnvDir + "=", "XDG_RUNTIME_DIR=", "XDG_CACHE_HOME=", "STATE_DIRECTORY=",
			"TMPDIR=" + tmp, "HOME=/nonexistent"}})
	code, _ := p.wait(p.started, 30*time.Second)
	out := p.stderr.String()
	if code != 3 || !strings.Contains(out, claims.EnvDir) || strings.Contains(out, squatted) || strings.Contains(out, "uid 65534") {
		t.Fatalf("with HOME=/nonexistent: exit %d, want 3 naming %s and not %s:\n%s", code, claims.EnvDir, squatted, out)
	}
	t.Logf("with HOME=/nonexistent: %s", strings.TrimSpace(out))
}
