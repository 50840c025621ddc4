//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
	"github.com/envoy-agent/envoy-agent/internal/hostfiles"
	"github.com/envoy-agent/envoy-agent/service/claims"
)

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
