package envoy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/testenvoy"
)

// load sends keep-alive requests from a few workers until stop is closed
// and counts outcomes and the x-config-version answers seen.
type load struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	versions   map[string]int
	lastErr    atomic.Value
	wg         sync.WaitGroup
}

func startLoad(url string, workers int, stop <-chan struct{}) *load {
	l := &load{versions: map[string]int{}}
	for range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			client := &http.Client{Timeout: 5 * time.Second}
			for i := 0; i < 100000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := client.Get(url)
				if err != nil {
					l.failed.Add(1)
					l.lastErr.Store(err.Error())
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					l.failed.Add(1)
					l.lastErr.Store(resp.Status)
					continue
				}
				l.ok.Add(1)
				l.mu.Lock()
				l.versions[resp.Header.Get("x-config-version")]++
				l.mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	return l
}

func (le *liveEnvoy) bootstrap(t *testing.T, name, version string) string {
	return testenvoy.WriteBootstrap(t, le.proxy.runDir, name, testenvoy.BootstrapOptions{Ports: le.ports, ResponseHeader: version})
}

func TestHotRestartSwitchesConfigWithoutFailures(t *testing.T) {
	t.Parallel()
	le := startAgent(t, agentOptions{termination: 5 * time.Second, minDrain: time.Second, drainDuration: time.Second})
	stop := make(chan struct{})
	l := startLoad(testenvoy.URL(le.ports.Listener, "/"), 4, stop)
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
		time.Sleep(300 * time.Millisecond)
	}
	close(stop)
	l.wg.Wait()
	if l.failed.Load() != 0 || l.ok.Load() < 100 {
		t.Fatalf("%d ok, %d failed (last: %v) across 3 hot restarts; want 0 failed", l.ok.Load(), l.failed.Load(), l.lastErr.Load())
	}
	if l.versions["v3"] == 0 {
		t.Fatalf("never saw v3 answers: %v", l.versions)
	}
	si, err := le.proxy.Admin().ServerInfo(context.Background())
	if err != nil || si.CommandLineOptions.RestartEpoch != 3 || le.proxy.Epoch() != 3 {
		t.Fatalf("admin answers epoch %d (%v), proxy says %d; want 3", si.CommandLineOptions.RestartEpoch, err, le.proxy.Epoch())
	}
	if !testenvoy.Eventually(10*time.Second, func() bool { return !testenvoy.Alive(oldPid) }) {
		t.Errorf("epoch 0 (pid %d) never exited after being replaced", oldPid)
	}
	took, err := le.stop(t, 30*time.Second)
	if err != nil || took > 10*time.Second {
		t.Fatalf("stop after hot restarts: %v after %s", err, took)
	}
	if _, err := os.Stat(shmPath(le.proxy.cfg.BaseID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("envoy's shared memory is left behind: %v", err)
	}
}

func TestFailedHotRestartKeepsServingAndRecoversAdmin(t *testing.T) {
	t.Parallel()
	le := startAgent(t, agentOptions{termination: 5 * time.Second, minDrain: time.Second, drainDuration: time.Second})
	stop := make(chan struct{})
	l := startLoad(testenvoy.URL(le.ports.Listener, "/"), 4, stop)

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
	cfg.ConfigPath = testenvoy.WriteBootstrap(t, le.proxy.runDir, "bad.yaml", testenvoy.BootstrapOptions{Ports: badPorts, ResponseHeader: "bad"})
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
	time.Sleep(300 * time.Millisecond)
	close(stop)
	l.wg.Wait()
	if l.failed.Load() != 0 {
		t.Fatalf("%d failed requests (last: %v)", l.failed.Load(), l.lastErr.Load())
	}
	if l.versions["good"] == 0 || l.versions["bad"] != 0 {
		t.Fatalf("versions seen %v; want good answers and no bad ones", l.versions)
	}
	t.Logf("good hot restart took epoch %d; answers %v", epoch, l.versions)
	took, err := le.stop(t, 30*time.Second)
	if err != nil || took > 10*time.Second {
		t.Fatalf("stop: %v after %s", err, took)
	}
}
