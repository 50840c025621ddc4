//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
	"github.com/envoy-agent/envoy-agent/service/claims"
)

// buildVersion builds the agent with main.version set, once per version.
var builds sync.Map

func buildVersion(t *testing.T, version string) string {
	t.Helper()
	if p, ok := builds.Load(version); ok {
		return p.(string)
	}
	out := filepath.Join(filepath.Dir(agentBin(t)), "envoy-agent-"+version)
	build := exec.Command("go", "build", "-ldflags", "-X main.version="+version, "-o", out, ".")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", version, err, b)
	}
	builds.Store(version, out)
	return out
}

// install puts the file at src in place at dst as a package manager does:
// a new file renamed over the old one (the running agent keeps its inode).
func install(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	tmp := dst + ".new"
	if err := os.WriteFile(tmp, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
}

// upgradeInfo is GET /upgrade on the agent's control socket.
func (p *agentProc) upgradeInfo() map[string]any {
	p.t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", p.controlSocket())
		}}}
	resp, err := c.Get("http://envoy-agent/upgrade")
	if err != nil {
		p.t.Fatalf("GET /upgrade: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		p.t.Fatalf("GET /upgrade: %s %s", resp.Status, body)
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		p.t.Fatalf("GET /upgrade: %v: %s", err, body)
	}
	return m
}

// watchClaim looks at the claim file's lock until the test ends; the
// function it returns says how many looks found it free, of how many.
func watchClaim(t *testing.T, path string) func() (free, looks int) {
	t.Helper()
	var freeN, looksN atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	// A look a millisecond: the gap the abstract claims had (the old image
	// closed them at the exec, the new one bound them when it ran) was
	// about 20ms.
	tick := time.NewTicker(time.Millisecond)
	go func() {
		defer close(done)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			f, err := os.Open(path)
			if err == nil {
				lk := unix.Flock_t{Type: unix.F_RDLCK}
				if unix.FcntlFlock(f.Fd(), unix.F_OFD_GETLK, &lk) == nil && lk.Type == unix.F_UNLCK {
					freeN.Add(1)
				}
				f.Close()
			} else {
				freeN.Add(1)
			}
			looksN.Add(1)
		}
	}()
	var once sync.Once
	end := func() { once.Do(func() { close(stop); <-done }) }
	t.Cleanup(end)
	return func() (int, int) { end(); return int(freeN.Load()), int(looksN.Load()) }
}

// assertComm fails the test unless process pid's command name (what
// `pgrep -x` and `ps -C` match) is want.
func assertComm(t *testing.T, pid int, want string) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSuffix(string(b), "\n"); got != want {
		t.Fatalf("the agent (pid %d) is named %q in /proc/%d/comm, want %q: pgrep -x %s and ps -C %s no longer find it", pid, got, pid, want, want, want)
	}
}

// envoysFor counts the Envoy processes running the test's bootstrap copies.
func envoysFor(dir string) int {
	n := 0
	for _, c := range processesMentioning(dir) {
		if strings.Contains(c, "--restart-epoch") {
			n++
		}
	}
	return n
}

// TestUpgradeUnderLoadKeepsEnvoy swaps the agent's binary three times under
// load (twice with the first Envoy, then after a reload, so that an exec
// carries an epoch a re-executed agent forked itself), then offers a broken
// binary: no request
// fails, the agent's pid and Envoy stay, and the broken one is refused.
func TestUpgradeUnderLoadKeepsEnvoy(t *testing.T) {
	t.Parallel()
	binA, binB, binC := buildVersion(t, "1.0.0-a"), buildVersion(t, "1.0.1-b"), buildVersion(t, "1.0.2-c")
	installed := filepath.Join(t.TempDir(), "envoy-agent")
	install(t, binA, installed)
	// A 2s watchdog: the pings (every 1s) must go on across each exec.
	p := startAgent(t, procOptions{binary: installed, envoy: quickDrain, watchdogUsec: 2_000_000})
	agentPid, envoyPid := p.proc.Pid(), p.envoyPid
	l := envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: envoykit.URL(p.ports.Listener, "/"), Connections: 4})
	defer l.Stop()
	if !envoykit.Eventually(10*time.Second, func() bool { return l.OK() > 100 }) {
		t.Fatalf("no load through Envoy: %d ok, %d failed (%s)", l.OK(), l.Failed(), l.LastErr())
	}

	upgrade := func(requester, to string) string {
		t.Helper()
		code, out := runBinary(t, nil, requester, "upgrade", "--config", p.config)
		if code != 0 || !strings.Contains(out, "-> "+to+" in pid "+fmt.Sprint(agentPid)) {
			t.Fatalf("upgrade to %s: exit %d: %s", to, code, out)
		}
		return out
	}

	// The base id claim must stay locked through every exec: its lock's
	// file description is handed over, never released and taken again.
	claim := filepath.Join(os.Getenv(claims.EnvDir), fmt.Sprintf("base-id-%d", configBaseID(t, p.config)))
	gaps := watchClaim(t, claim)

	install(t, binB, installed)
	out := upgrade(binB, "1.0.1-b")
	t.Logf("%s", strings.TrimSpace(out))
	info := p.upgradeInfo()
	if info["version"] != "1.0.1-b" || info["adopted_from"] != "1.0.0-a" || int(info["envoy_pid"].(float64)) != envoyPid || int(info["pid"].(float64)) != agentPid {
		t.Fatalf("after the upgrade: %v; want version 1.0.1-b adopted from 1.0.0-a, envoy pid %d, agent pid %d", info, envoyPid, agentPid)
	}
	// Operators find the daemon by name (pgrep -x, ps -C: /proc/PID/comm);
	// the exec through /proc/self/fd/N once named it "N".
	assertComm(t, agentPid, "envoy-agent")

	// A second exec: epoch 0 was forked before the first one, by the
	// thread that is now the main thread; it must survive this exec too.
	install(t, binC, installed)
	upgrade(binC, "1.0.2-c")
	if info := p.upgradeInfo(); info["version"] != "1.0.2-c" || int(info["envoy_pid"].(float64)) != envoyPid {
		t.Fatalf("after the second upgrade: %v; want 1.0.2-c serving envoy pid %d", info, envoyPid)
	}

	// The twice re-executed agent hot-restarts Envoy (it forks epoch 1),
	// then execs once more (back to A, a downgrade): epoch 1 must survive.
	if code, out := p.reload(); code != 0 || !strings.Contains(out, "epoch 1 is serving") {
		t.Fatalf("reload after the upgrades: exit %d: %s", code, out)
	}
	epoch1 := int(p.upgradeInfo()["envoy_pid"].(float64))
	// The re-executed agent's epoch uses the same private hot-restart sockets.
	if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", epoch1)); !strings.Contains(string(cmdline), "--socket-path\x00"+filepath.Join(p.dir, "run", "hot-restart")+"\x00--socket-mode\x00600") {
		t.Fatalf("epoch 1 after two upgrades runs %q; want --socket-path %s/run/hot-restart --socket-mode 600", cmdline, p.dir)
	}
	install(t, binA, installed)
	upgrade(binA, "1.0.0-a")
	if info := p.upgradeInfo(); info["version"] != "1.0.0-a" || int(info["envoy_pid"].(float64)) != epoch1 || int(info["epoch"].(float64)) != 1 {
		t.Fatalf("after the third upgrade: %v; want 1.0.0-a serving epoch 1, pid %d", info, epoch1)
	}
	// Logrotate's reopen-logs reaches the adopted epochs too: epoch 0, replaced and still
	// draining, gets SIGUSR1 from an agent that did not fork it (it crashed the agent once:
	// an adopted epoch has no exec.Cmd).
	draining := envoysFor(p.dir) == 2
	if code, out := runBinary(t, nil, binA, "reopen-logs", "--config", p.config); code != 0 {
		t.Fatalf("reopen-logs after the upgrades: exit %d: %s", code, out)
	}
	if info := p.upgradeInfo(); int(info["pid"].(float64)) != agentPid || int(info["envoy_pid"].(float64)) != epoch1 {
		t.Fatalf("after reopen-logs: %v; want agent pid %d serving envoy pid %d", info, agentPid, epoch1)
	}
	if !draining {
		t.Logf("epoch 0 had exited before reopen-logs: only the serving epoch was told")
	}
	// Epoch 0 drains and exits by itself (parent_shutdown_duration 2s): one Envoy left.
	if !envoykit.Eventually(10*time.Second, func() bool { return envoysFor(p.dir) == 1 }) {
		t.Fatalf("Envoys left: %v", processesMentioning(p.dir))
	}

	// A broken new binary: exits 1 at once. The upgrade is refused, the
	// agent says so, and nothing changes.
	broken := filepath.Join(t.TempDir(), "broken")
	if err := os.WriteFile(broken, []byte("#!/bin/sh\necho broken >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	install(t, broken, installed)
	code, out := runBinary(t, nil, binA, "upgrade", "--config", p.config)
	if code != 1 || !strings.Contains(out, "upgrade refused") || !strings.Contains(out, "does not run") {
		t.Fatalf("upgrade to a broken binary: exit %d: %s", code, out)
	}
	if info := p.upgradeInfo(); info["version"] != "1.0.0-a" || int(info["envoy_pid"].(float64)) != epoch1 || info["live"] != true {
		t.Fatalf("after the refused upgrade: %v", info)
	}

	assertComm(t, agentPid, "envoy-agent")

	envoykit.WaitAnswers(t, l, 20) // load after the last step, to count
	l.Stop()
	n, looks := gaps()
	if n != 0 || looks == 0 {
		t.Fatalf("the base id claim %s was free %d times in %d looks across the upgrades", claim, n, looks)
	}
	t.Logf("the base id claim was held at each of %d looks across the upgrades", looks)
	t.Logf("%d requests ok, %d failed across three upgrades, a reload and a refused upgrade", l.OK(), l.Failed())
	if l.Failed() != 0 {
		t.Fatalf("%d of %d requests failed (last: %s)", l.Failed(), l.OK()+l.Failed(), l.LastErr())
	}

	// What systemd saw: the same pid throughout (the process never exited),
	// RELOADING=1 with MONOTONIC_USEC before each exec, READY=1 naming the
	// adoption after, "upgrade refused" for the broken binary, and
	// watchdog pings never further apart than the 2s timeout.
	select {
	case <-p.done:
		t.Fatalf("the agent process exited (%d)", p.proc.ExitCode())
	default:
	}
	var adopted, refused int
	var last time.Time
	var worst time.Duration
	for _, m := range p.ns.Messages() {
		if envoykit.HasAssignment(m.Text, "RELOADING=1") && strings.Contains(m.Text, "upgrading") && !envoykit.HasAssignment(m.Text, "MONOTONIC_USEC=") {
			t.Errorf("RELOADING=1 without MONOTONIC_USEC: %q", m.Text)
		}
		if envoykit.HasAssignment(m.Text, "READY=1") && strings.Contains(m.Text, "adopted epoch") {
			adopted++
		}
		if strings.Contains(m.Text, "upgrade refused: the new "+installed+" does not run") {
			refused++
		}
		if envoykit.HasAssignment(m.Text, "WATCHDOG=1") {
			if !last.IsZero() {
				worst = max(worst, m.At.Sub(last))
			}
			last = m.At
		}
	}
	if adopted != 3 || refused != 1 {
		t.Errorf("%d READY=1 naming an adoption (want 3), %d STATUS= naming the refusal (want 1)", adopted, refused)
	}
	if worst == 0 || worst >= 2*time.Second {
		t.Errorf("longest gap between watchdog pings %s; the watchdog is 2s", worst)
	}
	t.Logf("longest gap between watchdog pings: %s", worst)
	if !p.logged("upgrade refused, envoy-agent 1.0.0-a keeps serving") {
		t.Errorf("the log does not name the refused upgrade")
	}

	sent := p.signal(syscall.SIGTERM)
	if code, _ := p.wait(sent, 30*time.Second); code != 0 {
		t.Fatalf("stop after the upgrades exited %d", code)
	}
	assertNoEnvoyFor(t, p.dir)
}

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
	load := envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: envoykit.URL(p.ports.Listener, "/"), Client: envoykit.RawHTTP1,
		Workers: []envoykit.Workers{{N: 2}}})
	if !envoykit.Eventually(10*time.Second, func() bool { return load.OK() > 50 }) {
		t.Fatalf("no load through Envoy: %s", load)
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
			code, out := runBinary(t, nil, binB, "upgrade", "--config", p.config)
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
	load.Stop()
	t.Logf("load across the faults: %s", load)
	if load.Failed() != 0 || load.OK() == 0 {
		t.Fatalf("load: %s: %q", load, load.Errors())
	}
}

// TestUpgradeKeepsRoutesAndCertificatesServed: with the routes and the
// certificates served by the agent's ADS server, a live upgrade hands the
// server's socket and the certificates over: the Envoy stays, reconnects
// and is answered from the same sets (nothing unknown to the new agent);
// a renewal after it reaches new handshakes within 2 s with the same
// Envoy; a route reload after it is taken (the first hot-restarts, as
// after any upgrade, the next is in place), and a renewal reaches the new
// epoch too; no request of a client that does not retry fails.
func TestUpgradeKeepsRoutesAndCertificatesServed(t *testing.T) {
	t.Parallel()
	binA, binB := buildVersion(t, "1.0.0-a"), buildVersion(t, "1.0.1-b")
	installed := filepath.Join(t.TempDir(), "envoy-agent")
	install(t, binA, installed)
	certDir := t.TempDir()
	certFile, keyFile := filepath.Join(certDir, "cert.pem"), filepath.Join(certDir, "key.pem")
	c1, k1, s1 := servingPair(t, time.Now().Add(90*24*time.Hour))
	writeFile(t, certFile, c1)
	writeFile(t, keyFile, k1)
	bootstrap := filepath.Join(t.TempDir(), "envoy.yaml")
	var kit string
	var tlsPort int
	// version is the bootstrap with the HTTP listener's header v.
	version := func(v string) string { return strings.Replace(kit, `value: "v1"`, `value: "`+v+`"`, 1) }
	p := startAgentWith(t, procOptions{binary: installed, bootstrapFile: bootstrap, envoy: quickDrain, agent: map[string]string{"reload_method": `"auto"`}}, func(ports envoykit.Ports) {
		text, err := envoykit.RenderBootstrap(envoykit.BootstrapOptions{Ports: ports, ResponseHeader: "v1"})
		if err != nil {
			t.Fatal(err)
		}
		tlsPort = envoykit.FreePort(t)
		tls := string(envoykit.TLSBootstrap(certFile, keyFile, tlsPort, ports.Admin))
		tls = tls[strings.Index(tls, "  - name: tls"):]
		kit = strings.Replace(string(text), "  clusters:\n", tls+"  clusters:\n", 1)
		writeFile(t, bootstrap, kit)
	})
	agentPid, envoyPid := p.proc.Pid(), p.envoyPid
	if got, err := envoykit.TLSSerial(tlsPort); err != nil || got != s1 {
		t.Fatalf("first handshake: %s, %v; want %s", got, err, s1)
	}
	l := envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: envoykit.URL(p.ports.Listener, "/"), Client: envoykit.RawHTTP1,
		Workers: []envoykit.Workers{{N: 4, Path: "/"}}})
	defer l.Stop()
	envoykit.WaitAnswers(t, l, 20)

	install(t, binB, installed)
	if code, out := runBinary(t, nil, binB, "upgrade", "--config", p.config); code != 0 || !strings.Contains(out, "-> 1.0.1-b in pid "+fmt.Sprint(agentPid)) {
		t.Fatalf("upgrade: exit %d: %s", code, out)
	}
	if info := p.upgradeInfo(); info["version"] != "1.0.1-b" || int(info["envoy_pid"].(float64)) != envoyPid {
		t.Fatalf("after the upgrade: %v; want 1.0.1-b serving envoy pid %d", info, envoyPid)
	}
	// Envoy reconnects to the socket handed over, asking for what the new
	// agent serves it.
	connected := fmt.Sprintf("xds: Envoy pid %d (epoch epoch-0-1) connected", envoyPid)
	if !envoykit.Eventually(10*time.Second, func() bool { return strings.Count(p.stderr.String(), connected) == 2 }) {
		t.Fatalf("Envoy did not reconnect to the ADS server after the upgrade:\n%s", p.stderr)
	}
	if strings.Contains(p.stderr.String(), "which its set does not have") {
		t.Fatalf("the new agent lacks what Envoy asks for:\n%s", p.stderr)
	}

	// A renewal after the upgrade.
	c2, k2, s2 := servingPair(t, time.Now().Add(90*24*time.Hour))
	replaceFile(t, keyFile, []byte(k2), 0o644)
	replaceFile(t, certFile, []byte(c2), 0o644)
	var got string
	var err error
	if !envoykit.Eventually(2*time.Second, func() bool { got, err = envoykit.TLSSerial(tlsPort); return got == s2 }) {
		t.Fatalf("2 s after the renewal new handshakes see %s, %v; want %s", got, err, s2)
	}
	if pid := p.servingPid(); pid != envoyPid {
		t.Fatalf("Envoy pid %d serves after the renewal, want %d", pid, envoyPid)
	}

	// Route reloads: the first after an upgrade hot-restarts, the next is
	// in place.
	rewrite := func(text string) {
		t.Helper()
		if err := envoykit.WriteFileAtomic(bootstrap, []byte(text)); err != nil {
			t.Fatal(err)
		}
	}
	rewrite(version("v2"))
	if code, out := p.reload(); code != 0 || !strings.Contains(out, "epoch 1 is serving") {
		t.Fatalf("the first reload after the upgrade: exit %d: %s", code, out)
	}
	if !envoykit.Eventually(5*time.Second, func() bool { return l.Latest() == "v2" }) {
		t.Fatalf("after the first reload the listener answers %q, want v2", l.Latest())
	}
	rewrite(version("v3"))
	if code, out := p.reload(); code != 0 || !strings.Contains(out, "reloaded in place: routes updated ingress/0/0; epoch 1 keeps serving") {
		t.Fatalf("the second reload after the upgrade: exit %d: %s", code, out)
	}
	if !envoykit.Eventually(5*time.Second, func() bool { return l.Latest() == "v3" }) {
		t.Fatalf("after the second reload the listener answers %q, want v3", l.Latest())
	}
	epoch1 := p.servingPid()
	c3, k3, s3 := servingPair(t, time.Now().Add(90*24*time.Hour))
	replaceFile(t, keyFile, []byte(k3), 0o644)
	replaceFile(t, certFile, []byte(c3), 0o644)
	if !envoykit.Eventually(2*time.Second, func() bool { got, err = envoykit.TLSSerial(tlsPort); return got == s3 }) {
		t.Fatalf("2 s after the renewal in epoch 1 new handshakes see %s, %v; want %s", got, err, s3)
	}
	if pid := p.servingPid(); pid != epoch1 {
		t.Fatalf("Envoy pid %d serves after the second renewal, want %d", pid, epoch1)
	}
	envoykit.WaitAnswers(t, l, l.OK()+20)
	l.Stop()
	t.Logf("%d requests ok, %d failed across the upgrade, two renewals and two reloads", l.OK(), l.Failed())
	if l.Failed() != 0 {
		t.Fatalf("%d of %d requests failed (last: %s)", l.Failed(), l.OK()+l.Failed(), l.LastErr())
	}
}
