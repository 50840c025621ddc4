//go:build linux

package main

// Fault tests: each fault repeated ENVOY_AGENT_TRIALS times (default 3; CI
// sets more), with the real Envoy.

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
	"github.com/envoy-agent/envoy-agent/internal/hostfiles"
	"github.com/envoy-agent/envoy-agent/service/claims"
)

func trials() int {
	if n, err := strconv.Atoi(os.Getenv("ENVOY_AGENT_TRIALS")); err == nil && n > 0 {
		return n
	}
	return 3
}

func TestFaultSigkillOfAgentUnderLoadNeverOrphansEnvoy(t *testing.T) {
	n, orphans := trials(), 0
	for i := 0; i < n; i++ {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			p := startAgent(t, procOptions{})
			l := envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: envoykit.URL(p.ports.Listener, "/"), Connections: 2})
			defer l.Stop()
			if !envoykit.Eventually(10*time.Second, func() bool { return l.OK() > 10 }) {
				t.Fatalf("no load went through Envoy: %s", l.LastErr())
			}
			p.signal(syscall.SIGKILL)
			<-p.done
			if !envoykit.Eventually(3*time.Second, func() bool { return !envoykit.Alive(p.envoyPid) }) {
				orphans++
				t.Errorf("envoy pid %d outlived its SIGKILLed agent", p.envoyPid)
			}
		})
	}
	t.Logf("SIGKILL of the agent under load: %d trials, %d orphaned Envoys", n, orphans)
}

func TestFaultEnvoyKilledRepeatedly(t *testing.T) {
	n, slow := trials(), 0
	for i := 0; i < n; i++ {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			p := startAgent(t, procOptions{})
			killed := time.Now()
			if err := syscall.Kill(p.envoyPid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			code, took := p.wait(killed, 10*time.Second)
			if code != 1 || !strings.Contains(p.stderr.String(), "SIGKILL") {
				t.Errorf("exit %d; stderr lacks SIGKILL", code)
			}
			if took > noticeBound {
				slow++
				t.Errorf("agent exited %s after Envoy died", took)
			}
		})
	}
	t.Logf("SIGKILL of Envoy: %d trials, %d not noticed within %s", n, slow, noticeBound)
}

func TestFaultPortsTakenAtStart(t *testing.T) {
	tests := []struct {
		name string
		take func(envoykit.Ports) int
		want string
	}{
		{"admin port", func(p envoykit.Ports) int { return p.Admin }, "cannot bind"},
		{"listener port", func(p envoykit.Ports) int { return p.Listener }, "Address already in use"},
		{"status port", func(p envoykit.Ports) int { return p.Status }, "agent.status_port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := startAgentTaking(t, tt.take)
			code, _ := p.wait(p.started, 20*time.Second)
			if code != 1 || !strings.Contains(p.stderr.String(), tt.want) {
				t.Fatalf("exit %d, want 1 with %q:\n%s", code, tt.want, p.stderr)
			}
			assertNoEnvoyFor(t, p.dir)
		})
	}
}

// startAgentTaking starts an agent after binding the port take picks.
func startAgentTaking(t *testing.T, take func(envoykit.Ports) int) *agentProc {
	t.Helper()
	var ln net.Listener
	p := startAgentWith(t, procOptions{noWaitReady: true}, func(ports envoykit.Ports) {
		var err error
		ln, err = net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(take(ports)))
		if err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { ln.Close() })
	return p
}

func TestFaultIncompatibleBinaryBeforeReload(t *testing.T) {
	t.Parallel()
	p := startAgent(t, procOptions{envoy: quickDrain, bootstrap: envoykit.BootstrapOptions{ResponseHeader: "v0"}})
	l := envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: envoykit.URL(p.ports.Listener, "/"), Connections: 2})
	defer l.Stop()
	// A stand-in for an Envoy of another hot-restart version: a real Envoy
	// of another version is not at hand, so this script answers
	// --hot-restart-version differently and runs the real Envoy otherwise.
	standIn := filepath.Join(p.dir, "envoy-other-version-stand-in")
	writeFile(t, standIn, "#!/bin/sh\n[ \"$1\" = --hot-restart-version ] && { echo 10.96; exit 0; }\nexec "+envoykit.Binary(t)+" \"$@\"\n")
	if err := os.Chmod(standIn, 0o755); err != nil {
		t.Fatal(err)
	}
	config, _ := os.ReadFile(p.config)
	writeFile(t, p.config, strings.Replace(string(config), strconv.Quote(envoykit.Binary(t)), strconv.Quote(standIn), 1))
	p.rewriteBootstrap(envoykit.BootstrapOptions{ResponseHeader: "v1"})
	code, out := p.reload()
	if code != 3 || !strings.Contains(out, "hot-restart version 10.96, the running Envoy 11.") {
		t.Fatalf("reload with an incompatible binary: exit %d: %s", code, out)
	}
	writeFile(t, p.config, string(config))
	if code, out := p.reload(); code != 0 {
		t.Fatalf("reload after restoring the binary: exit %d: %s", code, out)
	}
	envoykit.Eventually(10*time.Second, func() bool { return l.Latest() == "v1" })
	l.Stop()
	if l.Failed() != 0 || l.Latest() != "v1" {
		t.Fatalf("%d failed, latest %q", l.Failed(), l.Latest())
	}
}

func TestFaultBootstrapRewrittenDuringReloads(t *testing.T) {
	t.Parallel()
	p := startAgent(t, procOptions{envoy: quickDrain, bootstrap: envoykit.BootstrapOptions{ResponseHeader: "w0"}})
	l := envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: envoykit.URL(p.ports.Listener, "/"), Connections: 2})
	defer l.Stop()
	// A careless writer: the file is truncated and rewritten in place
	// (no rename), over and over, while reloads read it. A reload may read
	// part of a file, and a prefix of a bootstrap often validates (no
	// routes, no endpoints, no listeners at all). The reload must see that
	// the file changed while it read and validated it and refuse it as a
	// bad configuration (exit 3); never run a torn copy (requests fail),
	// nor fail at run time (exit 1) by running a copy other than the one
	// it validated.
	texts := make([][]byte, 5)
	for i := range texts {
		var err error
		if texts[i], err = envoykit.RenderBootstrap(envoykit.BootstrapOptions{Ports: p.ports, ResponseHeader: "w" + strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
	}
	bootstrap := filepath.Join(p.dir, "envoy.yaml")
	stop := make(chan struct{})
	writeErr := make(chan error, 1)
	go func() {
		defer close(writeErr)
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			f, err := os.OpenFile(bootstrap, os.O_WRONLY|os.O_TRUNC, 0)
			if err == nil {
				// Two writes, so that a reader can see a truncated file.
				text := texts[i%len(texts)]
				_, err = f.Write(text[:len(text)/2])
				if err == nil {
					_, err = f.Write(text[len(text)/2:])
				}
				f.Close()
			}
			if err != nil {
				writeErr <- err // t.Fatal belongs to the test's goroutine
				return
			}
		}
	}()
	codes := map[int]int{}
	changed := 0
	for i := 0; i < 8; i++ {
		code, out := p.reload()
		codes[code]++
		if code != 0 && code != 3 {
			t.Errorf("reload %d: exit %d: %s; want 0, or 3 for a half-written file", i, code, out)
		}
		if code == 3 && !strings.Contains(out, bootstrap) {
			t.Errorf("reload %d: exit 3 without naming %s: %s", i, bootstrap, out)
		}
		if strings.Contains(out, "changed while the agent read and validated it") {
			changed++
		}
	}
	close(stop)
	if err := <-writeErr; err != nil {
		t.Fatalf("the writer: %v", err)
	}
	// The file is whole again: a reload takes it.
	writeFile(t, bootstrap, string(texts[3]))
	if code, out := p.reload(); code != 0 {
		t.Fatalf("reload of the whole file: exit %d: %s", code, out)
	}
	if !envoykit.Eventually(10*time.Second, func() bool { return l.Latest() == "w3" }) {
		t.Errorf("the answers say %q after the last reload, want w3", l.Latest())
	}
	l.Stop()
	t.Logf("8 reloads while the bootstrap was rewritten in place: exit codes %v, %d refused as changed while read; requests %d ok, %d failed", codes, changed, l.OK(), l.Failed())
	if l.Failed() != 0 {
		t.Fatalf("%d requests failed (last: %s)", l.Failed(), l.LastErr())
	}
	if changed == 0 {
		t.Errorf("no reload saw that the file was being written")
	}
	for v := range l.Versions() {
		if len(v) != 2 || v[0] != 'w' || v[1] < '0' || v[1] > '4' {
			t.Errorf("an answer had version %q, which was never written", v)
		}
	}
	if c := p.healthz(); c != 200 {
		t.Errorf("/healthz/ready = %d afterwards", c)
	}
}

func TestFaultReloadStorm(t *testing.T) {
	t.Parallel()
	p := startAgent(t, procOptions{envoy: quickDrain, bootstrap: envoykit.BootstrapOptions{ResponseHeader: "s0"}})
	l := envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: envoykit.URL(p.ports.Listener, "/"), Connections: 4})
	defer l.Stop()
	// Five bursts of ten `envoy-agent reload` at once, each after a change
	// of the bootstrap: a burst's requests come while a reload runs (one
	// takes about 100 ms), and are coalesced into the next one.
	codes := map[int]int{}
	start := time.Now()
	for burst := 1; burst <= 5; burst++ {
		p.rewriteBootstrap(envoykit.BootstrapOptions{ResponseHeader: "s" + strconv.Itoa(burst)})
		var wg sync.WaitGroup
		var mu sync.Mutex
		for range 10 {
			wg.Go(func() {
				code, _ := p.reload()
				mu.Lock()
				codes[code]++
				mu.Unlock()
			})
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(120 * time.Second):
			t.Fatalf("burst %d: reload requests still pending after 120s", burst)
		}
		want := "s" + strconv.Itoa(burst)
		if !envoykit.Eventually(10*time.Second, func() bool { return l.Latest() == want }) {
			t.Errorf("after burst %d the answers say %q, want %s", burst, l.Latest(), want)
		}
	}
	l.Stop()
	runs, _ := strconv.Atoi(p.metric("envoy_agent_reloads_total"))
	t.Logf("50 reload requests in %s: exit codes %v, %d reload runs; requests %d ok, %d failed", time.Since(start).Round(time.Millisecond), codes, runs, l.OK(), l.Failed())
	if codes[0] != 50 {
		t.Errorf("exit codes %v; want 50 successes", codes)
	}
	// Coalesced: fewer runs than requests, and one at least for each
	// burst (each came after the last one's answers).
	if runs < 5 || runs >= 50 {
		t.Errorf("%d reload runs for 50 requests; want them coalesced into fewer, and one a burst at least", runs)
	}
	if l.Failed() != 0 {
		t.Errorf("%d requests failed (last: %s)", l.Failed(), l.LastErr())
	}
	if l.Latest() != "s5" {
		t.Errorf("latest answer %q, want s5", l.Latest())
	}
	sent := p.signal(syscall.SIGTERM)
	if code, _ := p.wait(sent, 30*time.Second); code != 0 {
		t.Fatalf("stop after the storm exited %d", code)
	}
	assertNoEnvoyFor(t, p.dir)
}

func TestReloadTakesANewBinaryOfTheSameHotRestartVersion(t *testing.T) {
	t.Parallel()
	p := startAgent(t, procOptions{envoy: quickDrain, bootstrap: envoykit.BootstrapOptions{ResponseHeader: "old-binary"}})
	l := envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: envoykit.URL(p.ports.Listener, "/"), Connections: 2})
	defer l.Stop()
	// "Upgrade" Envoy: the same release copied to a new path stands for a
	// newer build whose hot-restart version matches.
	newBin := filepath.Join(p.dir, "envoy-new")
	data, err := os.ReadFile(envoykit.Binary(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(newBin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	config, _ := os.ReadFile(p.config)
	writeFile(t, p.config, strings.Replace(string(config), strconv.Quote(envoykit.Binary(t)), strconv.Quote(newBin), 1))
	p.rewriteBootstrap(envoykit.BootstrapOptions{ResponseHeader: "new-binary"})
	if code, out := p.reload(); code != 0 {
		t.Fatalf("reload onto the new binary: exit %d: %s", code, out)
	}
	var pid int
	for _, msg := range p.ns.Messages() {
		if sm := pidRE.FindStringSubmatch(msg.Text); sm != nil && strings.Contains(msg.Text, "epoch 1") {
			pid, _ = strconv.Atoi(sm[1])
		}
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil || exe != newBin {
		t.Fatalf("epoch 1 (pid %d) runs %q (%v), want %s", pid, exe, err, newBin)
	}
	envoykit.Eventually(10*time.Second, func() bool { return l.Latest() == "new-binary" })
	l.Stop()
	if l.Failed() != 0 || l.Latest() != "new-binary" {
		t.Fatalf("%d failed, latest %q", l.Failed(), l.Latest())
	}
}

// TestEnvoyCrashNamesSignal: a real Envoy killed by SIGSEGV or SIGABRT (as a
// crash would) makes the agent's error name the signal, say whether a core
// was dumped (none here: the test's RLIMIT_CORE, which Envoy inherits, is
// set to 0) and give Envoy's last lines, its own crash report among them.
// The agent records that end in its state directory ($STATE_DIRECTORY, as
// systemd's StateDirectory= gives it), and the next agent's `envoy-agent
// status` shows it as the last exit.
func TestEnvoyCrashNamesSignal(t *testing.T) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_CORE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur != 0 {
		// An Envoy core is hundreds of megabytes: none in the test's folders.
		saved := lim
		lim.Cur = 0
		if err := syscall.Setrlimit(syscall.RLIMIT_CORE, &lim); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_CORE, &saved) })
	}
	for _, tc := range []struct {
		sig  syscall.Signal
		name string
	}{{syscall.SIGSEGV, "SIGSEGV"}, {syscall.SIGABRT, "SIGABRT"}} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			env := []string{"STATE_DIRECTORY=" + state, "INVOCATION_ID="} // not under systemd, whatever runs the test
			p := startAgent(t, procOptions{env: env})
			sent := time.Now()
			if err := syscall.Kill(p.envoyPid, tc.sig); err != nil {
				t.Fatal(err)
			}
			if code, _ := p.wait(sent, 10*time.Second); code != 1 {
				t.Fatalf("agent exited %d when Envoy died of %s, want 1", code, tc.name)
			}
			s := p.stderr.String()
			for _, want := range []string{
				fmt.Sprintf("envoy (pid %d, epoch 0) exited by itself", p.envoyPid),
				"(" + tc.name + "; no core dumped: core dumps are off",
				"its last log lines:",
				"Caught ", // Envoy's own signal handler's report, among its last lines
			} {
				if !strings.Contains(s, want) {
					t.Errorf("stderr lacks %q:\n%s", want, s)
				}
			}
			// The next run (systemd's restart) tells the operator how the last one ended.
			next := startAgent(t, procOptions{env: env})
			out, err := exec.Command(agentBin(t), "status", "--config", next.config).CombinedOutput()
			if err != nil {
				t.Fatalf("status: %v\n%s", err, out)
			}
			want := fmt.Sprintf("agent pid %d: envoy (pid %d, epoch 0) exited by itself after ", p.proc.Pid(), p.envoyPid)
			if !strings.Contains(string(out), "  last exit:    ") || !strings.Contains(string(out), want) || !strings.Contains(string(out), "("+tc.name+"; no core dumped") {
				t.Errorf("status lacks the last exit %q...%s:\n%s", want, tc.name, out)
			}
			t.Logf("status:\n%s", out)
			if strings.Contains(string(out), "unit:") {
				t.Errorf("status names a unit outside systemd:\n%s", out)
			}
		})
	}
}

// TestStartAfterSigkillMidReload kills the agent with SIGKILL while a
// reload's new epoch is starting, and every Envoy with it (as systemd's
// KillMode=mixed does): the run folder keeps the bootstrap copies, admin
// address files and hot-restart sockets, and /dev/shm Envoy's shared
// memory. The next start with the same file works the first time.
func TestStartAfterSigkillMidReload(t *testing.T) {
	rd := filepath.Join(t.TempDir(), "run")
	p := startAgent(t, procOptions{agent: map[string]string{"run_dir": strconv.Quote(rd)}})
	baseID := configBaseID(t, p.config)
	// The new epoch stays INITIALIZING: the reload is under way for 20s.
	p.rewriteBootstrap(envoykit.BootstrapOptions{InitDelay: 20 * time.Second})
	go func() { _, _ = p.reload() }()
	if !envoykit.Eventually(20*time.Second, func() bool { return strings.Contains(p.stderr.String(), "started envoy epoch 1") }) {
		t.Fatalf("the reload never started epoch 1:\n%s", p.stderr)
	}
	envoys := processesMentioning(rd)
	p.signal(syscall.SIGKILL)
	<-p.done
	for pid := range processesMentioning(rd) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if !envoykit.Eventually(5*time.Second, func() bool { return len(processesMentioning(rd)) == 0 }) {
		t.Fatalf("Envoys left: %v", processesMentioning(rd))
	}
	left, _ := filepath.Glob(filepath.Join(rd, "*"))
	shm := hostfiles.SharedMemoryPath(baseID)
	if _, err := os.Stat(shm); err != nil || len(left) < 3 {
		t.Fatalf("nothing left to clean (shared memory: %v; run folder: %v); the test proves nothing", err, left)
	}
	t.Logf("killed the agent and %d Envoys; left: %s and %v", len(envoys), shm, left)

	p.rewriteBootstrap(envoykit.BootstrapOptions{})
	text, err := os.ReadFile(p.config)
	if err != nil {
		t.Fatal(err)
	}
	again := startAgent(t, procOptions{configText: string(text)})
	out := again.stderr.String()
	for _, want := range []string{"removed " + shm, "removed " + filepath.Join(rd, "epoch-1-")} {
		if !strings.Contains(out, want) {
			t.Errorf("the start after the crash did not say %q:\n%s", want, out)
		}
	}
	if r, err := envoykit.Get(envoykit.URL(again.ports.Listener, "/"), 5*time.Second); err != nil || r.Code != 200 {
		// again.ports are new; the configuration is the first agent's
		if r, err = envoykit.Get(envoykit.URL(p.ports.Listener, "/"), 5*time.Second); err != nil || r.Code != 200 {
			t.Fatalf("the restarted Envoy does not serve: %+v %v", r, err)
		}
	}
	again.signal(syscall.SIGTERM)
	if code, _ := again.wait(again.started, 30*time.Second); code != 0 {
		t.Fatalf("the restarted agent exited %d on SIGTERM", code)
	}
	if _, err := os.Stat(shm); err == nil {
		t.Errorf("%s left after a clean stop", shm)
	}
}

// TestSharedMemoryOfAnotherUserIsNamed: uid 65534 made Envoy's shared
// memory region for the base id before the agent (another user) started;
// Envoy would panic on it ("File exists"). The agent refuses before Envoy
// starts, naming the region, its owner and the key.
func TestSharedMemoryOfAnotherUserIsNamed(t *testing.T) {
	const agentUid = 65533 // the service's user: neither root nor the squatter
	baseID := envoykit.BaseID()
	shm := hostfiles.SharedMemoryPath(baseID)
	squat := fmt.Sprintf("umask 0; echo x > %s", shm)
	mk := exec.Command("sh", "-c", squat)
	mk.SysProcAttr = &syscall.SysProcAttr{Credential: nobody}
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("uid 65534 could not make %s: %v %s", shm, err, out)
	}
	t.Cleanup(func() { _ = os.Remove(shm) })
	home := shortTempDir(t)
	for _, d := range []string{"run", "claims"} {
		if err := os.Mkdir(filepath.Join(home, d), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(filepath.Join(home, d), agentUid, agentUid); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(home, 0o755); err != nil {
		t.Fatal(err)
	}
	p := startAgent(t, procOptions{noWaitReady: true, cred: &syscall.Credential{Uid: agentUid, Gid: agentUid},
		envoy: map[string]string{"base_id": fmt.Sprint(baseID)},
		agent: map[string]string{"run_dir": strconv.Quote(filepath.Join(home, "run"))},
		env:   []string{claims.EnvDir + "=" + filepath.Join(home, "claims")}})
	code, _ := p.wait(p.started, 30*time.Second)
	out := p.stderr.String()
	want := fmt.Sprintf("%s, Envoy's hot-restart shared memory for base_id %d, already exists and belongs to uid 65534 (nobody, mode 0666; no process this agent may see maps it)", shm, baseID)
	if code == 0 || !strings.Contains(out, want) {
		t.Fatalf("exit %d; want a failure naming %q:\n%s", code, want, out)
	}
	t.Logf("the agent (uid %d) said:\n%s", agentUid, out)
	if strings.Contains(out, "started envoy") {
		t.Errorf("Envoy was started on the squatted region:\n%s", out)
	}
}
