//go:build linux

package envoy

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
	"github.com/envoy-agent/envoy-agent/internal/hostfiles"
)

func (le *liveEnvoy) bootstrap(t *testing.T, name, version string) string {
	return envoykit.WriteBootstrap(t, le.proxy.runDir, name, envoykit.BootstrapOptions{Ports: le.ports, ResponseHeader: version})
}

func TestHotRestartSwitchesConfigWithoutFailures(t *testing.T) {
	t.Parallel()
	le := startAgent(t, agentOptions{termination: 5 * time.Second, minDrain: time.Second, drainDuration: time.Second})
	l := envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: envoykit.URL(le.ports.Listener, "/"), Connections: 4})
	oldPid := le.proxy.Pid()
	for i := 1; i <= 3; i++ {
		cfg := le.proxy.config()
		cfg.ConfigPath = le.bootstrap(t, "v"+strconv.Itoa(i)+".yaml", "v"+strconv.Itoa(i))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		epoch, err := le.proxy.HotRestart(ctx, cfg)
		cancel()
		if err != nil || epoch != i {
			t.Fatalf("hot restart %d: epoch %d, %v", i, epoch, err)
		}
		// The load meets each epoch before the next hot restart.
		if v := "v" + strconv.Itoa(i); !envoykit.Eventually(10*time.Second, func() bool { return l.Latest() == v }) {
			t.Fatalf("after hot restart %d the answers say %q, want %s", i, l.Latest(), v)
		}
	}
	// Enough answers from the last epoch too for the count to mean
	// something (on a quiet machine three hot restarts take well under a
	// second).
	if !envoykit.Eventually(10*time.Second, func() bool { return l.OK() >= 100 }) {
		t.Fatalf("only %d answers within 10s of the last hot restart", l.OK())
	}
	l.Stop()
	if l.Failed() != 0 || l.OK() < 100 {
		t.Fatalf("%d ok, %d failed (last: %v) across 3 hot restarts; want 0 failed", l.OK(), l.Failed(), l.LastErr())
	}
	if l.Versions()["v3"] == 0 {
		t.Fatalf("never saw v3 answers: %v", l.Versions())
	}
	si, err := le.proxy.Admin().ServerInfo(context.Background())
	if err != nil || si.CommandLineOptions.RestartEpoch != 3 || le.proxy.Epoch() != 3 {
		t.Fatalf("admin answers epoch %d (%v), proxy says %d; want 3", si.CommandLineOptions.RestartEpoch, err, le.proxy.Epoch())
	}
	if !envoykit.Eventually(10*time.Second, func() bool { return !envoykit.Alive(oldPid) }) {
		t.Errorf("epoch 0 (pid %d) never exited after being replaced", oldPid)
	}
	took, err := le.stop(t, 30*time.Second)
	if err != nil || took > 10*time.Second {
		t.Fatalf("stop after hot restarts: %v after %s", err, took)
	}
	if _, err := os.Stat(hostfiles.SharedMemoryPath(le.proxy.cfg.BaseID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("envoy's shared memory is left behind: %v", err)
	}
}

func TestFailedHotRestartKeepsServingAndRecoversAdmin(t *testing.T) {
	t.Parallel()
	le := startAgent(t, agentOptions{termination: 5 * time.Second, minDrain: time.Second, drainDuration: time.Second})
	l := envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: envoykit.URL(le.ports.Listener, "/"), Connections: 4})

	// A bootstrap Envoy accepts (it passes --mode validate) but cannot
	// start: its listener's port is taken.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	badPorts := le.ports
	badPorts.Listener = taken.Addr().(*net.TCPAddr).Port
	cfg := le.proxy.config()
	cfg.ConfigPath = envoykit.WriteBootstrap(t, le.proxy.runDir, "bad.yaml", envoykit.BootstrapOptions{Ports: badPorts, ResponseHeader: "bad"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	_, err = le.proxy.HotRestart(ctx, cfg)
	cancel()
	var hre *HotRestartError
	if !errors.As(err, &hre) || !strings.Contains(err.Error(), "Address already in use") {
		t.Fatalf("HotRestart = %v; want a HotRestartError naming the taken address", err)
	}
	t.Logf("failed hot restart: %v", err)
	// The admin API answers LIVE again, and a good hot restart works.
	if r, err := le.proxy.Admin().Ready(context.Background()); err != nil || !r.Live {
		t.Fatalf("after the failed hot restart /ready = %+v, %v; want LIVE", r, err)
	}
	cfg.ConfigPath = le.bootstrap(t, "good.yaml", "good")
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Second)
	epoch, err := le.proxy.HotRestart(ctx, cfg)
	cancel()
	if err != nil {
		t.Fatalf("a good hot restart after a failed one: %v", err)
	}
	if !envoykit.Eventually(10*time.Second, func() bool { return l.Latest() == "good" }) {
		t.Fatalf("after the good hot restart the answers say %q", l.Latest())
	}
	envoykit.WaitAnswers(t, l, 20) // and keep coming from it
	l.Stop()
	if l.Failed() != 0 {
		t.Fatalf("%d failed requests (last: %v)", l.Failed(), l.LastErr())
	}
	if l.Versions()["good"] == 0 || l.Versions()["bad"] != 0 {
		t.Fatalf("versions seen %v; want good answers and no bad ones", l.Versions())
	}
	t.Logf("good hot restart took epoch %d; answers %v", epoch, l.Versions())
	took, err := le.stop(t, 30*time.Second)
	if err != nil || took > 10*time.Second {
		t.Fatalf("stop: %v after %s", err, took)
	}
}

func TestFilesTheProxyWritesArePrivate(t *testing.T) {
	t.Parallel()
	le := startAgent(t, agentOptions{termination: 2 * time.Second, minDrain: time.Second})
	entries, err := os.ReadDir(le.proxy.runDir)
	if err != nil {
		t.Fatal(err)
	}
	sawSnapshot := false
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			continue
		}
		if fi.Mode().Perm()&0o002 != 0 {
			t.Errorf("%s is world-writable (%v)", e.Name(), fi.Mode())
		}
		if strings.HasPrefix(e.Name(), "epoch-0-") {
			sawSnapshot = true
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("the bootstrap copy %s has mode %v, want 0600 (bootstraps hold secrets)", e.Name(), fi.Mode().Perm())
			}
		}
	}
	if !sawSnapshot {
		t.Fatalf("no bootstrap copy for epoch 0 in %s", le.proxy.runDir)
	}
}

func TestHotRestartWithoutSharedMemoryIsRefused(t *testing.T) {
	t.Parallel()
	le := startAgent(t, agentOptions{termination: 2 * time.Second, minDrain: time.Second, drainDuration: time.Second})
	if err := os.Remove(hostfiles.SharedMemoryPath(le.proxy.cfg.BaseID)); err != nil {
		t.Fatal(err)
	}
	cfg := le.proxy.config()
	cfg.ConfigPath = le.bootstrap(t, "v1.yaml", "v1")
	pid := le.proxy.Pid()
	_, err := le.proxy.HotRestart(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "hot-restart shared memory is gone") {
		t.Fatalf("HotRestart without /dev/shm region = %v", err)
	}
	if r, err := le.proxy.Admin().Ready(context.Background()); err != nil || !r.Live || le.proxy.Pid() != pid {
		t.Fatalf("the serving Envoy was touched: %+v %v, pid %d -> %d", r, err, pid, le.proxy.Pid())
	}
}

// TestDrainWaitCoversAReplacedEpochStillAccepting: a serving epoch holds
// its listening sockets; once replaced, WaitForDrainingEpochs returns only
// when it has closed them (or exited), not merely when it has no
// connection: between the new epoch's LIVE and its word to drain, the old
// one still accepts, and a hot restart then would end it with a request
// it had just taken.
func TestDrainWaitCoversAReplacedEpochStillAccepting(t *testing.T) {
	t.Parallel()
	le := startAgent(t, agentOptions{termination: 5 * time.Second, minDrain: time.Second, drainDuration: time.Second})
	old := le.proxy.serving()
	if listening, err := le.proxy.epochListening(old); err != nil || !listening {
		t.Fatalf("the serving epoch: listening %v, %v; want true", listening, err)
	}
	cfg := le.proxy.config()
	cfg.ConfigPath = le.bootstrap(t, "v1.yaml", "v1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := le.proxy.HotRestart(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	var reports []DrainingEpoch
	if _, err := le.proxy.WaitForDrainingEpochs(ctx, func(d DrainingEpoch) { reports = append(reports, d) }); err != nil {
		t.Fatal(err)
	}
	if listening, err := le.proxy.epochListening(old); err != nil || listening {
		t.Fatalf("epoch 0 after the wait: listening %v, %v; want false", listening, err)
	}
	t.Logf("the wait reported %d times: %+v", len(reports), reports)
}
