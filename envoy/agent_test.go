//go:build linux

package envoy

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// liveEnvoy is a real Envoy run by an Agent, for one test.
type liveEnvoy struct {
	proxy    *Envoy
	agent    *Agent
	ports    envoykit.Ports
	upstream *envoykit.Upstream
	cancel   context.CancelFunc
	done     chan error
}

type agentOptions struct {
	termination, minDrain time.Duration
	exitOnZero            bool
	drainDuration         time.Duration
}

func startAgent(t *testing.T, o agentOptions) *liveEnvoy {
	t.Helper()
	up := envoykit.NewUpstream(t)
	ports := envoykit.NewPorts(t)
	ports.Upstream = up.Port
	dir := t.TempDir()
	bootstrap := envoykit.WriteBootstrap(t, dir, "envoy.yaml", envoykit.BootstrapOptions{Ports: ports})
	if o.drainDuration == 0 {
		o.drainDuration = 10 * time.Second
	}
	p := NewEnvoy(ProxyConfig{
		BinaryPath:             envoykit.Binary(t),
		ConfigPath:             bootstrap,
		AdminPort:              int32(ports.Admin),
		DrainDuration:          durationpb.New(o.drainDuration),
		ParentShutdownDuration: durationpb.New(o.drainDuration + 5*time.Second),
		BaseID:                 envoykit.BaseID(),
		Concurrency:            1,
		LogLevel:               "warning",
		RunDir:                 dir,
		Stderr:                 testWriter{t},
		Stdout:                 testWriter{t},
	})
	a := NewAgent(p, o.termination, o.minDrain, "127.0.0.1", ports.Admin, ports.Status, ports.Prometheus, o.exitOnZero)
	a.SetDrainPollInterval(50 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	le := &liveEnvoy{proxy: p, agent: a, ports: ports, upstream: up, cancel: cancel, done: make(chan error, 1)}
	go func() { le.done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		a.DisableDraining()
		select {
		case <-le.done:
		case <-time.After(15 * time.Second):
			t.Errorf("agent did not return")
		}
	})
	if !envoykit.Eventually(20*time.Second, func() bool {
		r, err := p.Admin().Ready(context.Background())
		return err == nil && r.Live
	}) {
		t.Fatalf("envoy never became LIVE")
	}
	return le
}

type stopResult struct {
	err  error
	took time.Duration
}

// stopAsync cancels the agent's context (SIGTERM) and reports Run's result
// and how long it took, or a nil result after within.
func (le *liveEnvoy) stopAsync(within time.Duration) <-chan *stopResult {
	ch := make(chan *stopResult, 1)
	start := time.Now()
	le.cancel()
	go func() {
		select {
		case err := <-le.done:
			le.done <- err // for Cleanup
			ch <- &stopResult{err, time.Since(start)}
		case <-time.After(within):
			ch <- nil
		}
	}()
	return ch
}

// stop is stopAsync, waited for.
func (le *liveEnvoy) stop(t *testing.T, within time.Duration) (time.Duration, error) {
	t.Helper()
	r := <-le.stopAsync(within)
	if r == nil {
		t.Fatalf("agent did not return within %s of the stop", within)
	}
	return r.took, r.err
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Logf("envoy: %s", strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

type result struct {
	envoykit.Response
	err error
}

func slowRequest(le *liveEnvoy, d time.Duration) chan result {
	ch := make(chan result, 1)
	go func() {
		r, err := envoykit.Get(envoykit.URL(le.ports.Listener, "/slow?d="+d.String()), 30*time.Second)
		ch <- result{r, err}
	}()
	return ch
}

func waitActive(t *testing.T, le *liveEnvoy, n int) {
	t.Helper()
	if !envoykit.Eventually(5*time.Second, func() bool {
		got, err := le.proxy.Admin().ActiveConnections(context.Background())
		return err == nil && got == n
	}) {
		t.Fatalf("envoy never had %d active connections", n)
	}
}

func TestDrainLetsInFlightRequestFinishAndEndsAtZero(t *testing.T) {
	t.Parallel()
	le := startAgent(t, agentOptions{termination: 20 * time.Second, minDrain: time.Second, exitOnZero: true})
	var mu sync.Mutex
	var progress []DrainProgress
	le.agent.OnDrainProgress(func(p DrainProgress) { mu.Lock(); progress = append(progress, p); mu.Unlock() })
	req := slowRequest(le, 2*time.Second)
	waitActive(t, le, 1)

	stopped := le.stopAsync(30 * time.Second)

	// Envoy's own state shows the drain: health checks fail (/ready says
	// DRAINING) while the listener still accepts.
	if !envoykit.Eventually(2*time.Second, func() bool {
		r, err := le.proxy.Admin().Ready(context.Background())
		return err == nil && !r.Live && r.State == "DRAINING"
	}) {
		t.Errorf("envoy's /ready never said DRAINING after the stop began")
	}
	if !le.agent.Draining() {
		t.Errorf("Draining() is false during a drain")
	}
	r := <-req
	if r.err != nil || r.Code != 200 || r.Body != "slow ok\n" {
		t.Fatalf("in-flight request: code %d body %q err %v; want 200 \"slow ok\"", r.Code, r.Body, r.err)
	}
	if !r.Close {
		t.Errorf("the in-flight request's answer did not say Connection: close; a graceful drain asks the client to close")
	}
	sr := <-stopped
	if sr == nil {
		t.Fatal("agent did not return after the drain")
	}
	err, took := sr.err, sr.took
	if err != nil {
		t.Fatalf("Run returned %v, want nil", err)
	}
	// It waited for the request (about 2s) and ended once no connection
	// was left, far sooner than the 20s termination drain duration.
	if took < 1500*time.Millisecond || took > 10*time.Second {
		t.Errorf("stop took %s; want about the 2s the request needed", took)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(progress) == 0 || !progress[len(progress)-1].Done || progress[len(progress)-1].Reason != "no active connections left" {
		t.Fatalf("progress reports %+v; want a last Done report ending at zero connections", progress)
	}
	sawOne := false
	for _, p := range progress[:len(progress)-1] {
		if p.ActiveConnections == 1 {
			sawOne = true
		}
		if p.Remaining <= 0 || p.Remaining > 20*time.Second {
			t.Errorf("progress Remaining %s out of (0, 20s]", p.Remaining)
		}
	}
	if !sawOne {
		t.Errorf("no progress report saw the one active connection: %+v", progress)
	}
}

func TestDrainWaitsMinDrainDurationWithNoConnections(t *testing.T) {
	t.Parallel()
	le := startAgent(t, agentOptions{termination: 20 * time.Second, minDrain: 1500 * time.Millisecond, exitOnZero: true})
	took, err := le.stop(t, 30*time.Second)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if took < 1500*time.Millisecond || took > 6*time.Second {
		t.Errorf("stop took %s; want min_drain_duration 1.5s plus a poll", took)
	}
}

func TestDrainWaitsTerminationDrainDurationWithoutExitOnZero(t *testing.T) {
	t.Parallel()
	le := startAgent(t, agentOptions{termination: 2500 * time.Millisecond, minDrain: 500 * time.Millisecond})
	took, err := le.stop(t, 30*time.Second)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if took < 2500*time.Millisecond || took > 7*time.Second {
		t.Errorf("stop took %s; want termination_drain_duration 2.5s", took)
	}
}

func TestDrainNeverWaitsPastTerminationDrainDuration(t *testing.T) {
	t.Parallel()
	le := startAgent(t, agentOptions{termination: 2 * time.Second, minDrain: 500 * time.Millisecond, exitOnZero: true})
	req := slowRequest(le, 20*time.Second)
	waitActive(t, le, 1)
	took, err := le.stop(t, 30*time.Second)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if took < 2*time.Second || took > 7*time.Second {
		t.Errorf("stop took %s with a 20s request in flight; want termination_drain_duration 2s", took)
	}
	if r := <-req; r.err == nil && r.Code == 200 {
		t.Errorf("a request longer than the drain completed: %+v", r)
	}
}

func TestGracefulDrainClosesListenersAfterEnvoyDrainTime(t *testing.T) {
	t.Parallel()
	// drain_duration 1s: Envoy stops the listener 1s into the drain (the
	// proof that drain_listeners?graceful reached it); the agent keeps
	// draining up to termination_drain_duration.
	le := startAgent(t, agentOptions{termination: 6 * time.Second, minDrain: 6 * time.Second, drainDuration: time.Second})
	le.stopAsync(30 * time.Second)
	if !envoykit.Eventually(5*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(le.ports.Listener), time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	}) {
		t.Fatalf("the listener still accepts 5s into a drain with Envoy's drain time 1s")
	}
	if _, err := le.proxy.Admin().Ready(context.Background()); err != nil {
		t.Fatalf("envoy's admin is gone while the agent should still be draining: %v", err)
	}
}

func TestEnvoyKilledEndsRunWithExitError(t *testing.T) {
	t.Parallel()
	le := startAgent(t, agentOptions{termination: 5 * time.Second, minDrain: time.Second})
	pid := le.proxy.Pid()
	start := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-le.done:
		le.done <- err
		var ee *ExitError
		if !errors.As(err, &ee) || !ee.Killed() {
			t.Fatalf("Run returned %v; want an *ExitError for SIGKILL", err)
		}
		if !strings.Contains(err.Error(), "SIGKILL") || !strings.Contains(err.Error(), "signal: killed") {
			t.Errorf("error %q does not say Envoy was killed", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("Run noticed the death after %s", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("Run did not return after Envoy was killed")
	}
}

func TestDisableDrainingThenStopSkipsTheDrain(t *testing.T) {
	t.Parallel()
	le := startAgent(t, agentOptions{termination: 20 * time.Second, minDrain: 20 * time.Second})
	pid := le.proxy.Pid()
	le.agent.DisableDraining()
	took, err := le.stop(t, 30*time.Second)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if took > 3*time.Second {
		t.Errorf("a stop without drain took %s", took)
	}
	if envoykit.Alive(pid) {
		t.Errorf("envoy pid %d still alive", pid)
	}
}

func TestDrainNowKeepsListenersOpenAndStopIsImmediate(t *testing.T) {
	t.Parallel()
	le := startAgent(t, agentOptions{termination: 20 * time.Second, minDrain: 20 * time.Second, drainDuration: time.Second})
	le.agent.DrainNow()
	r, err := le.proxy.Admin().Ready(context.Background())
	if err != nil || r.Live {
		t.Fatalf("after DrainNow /ready = %+v, %v; want not live", r, err)
	}
	// skip_exit: past Envoy's 1s drain time the listener still serves.
	time.Sleep(2 * time.Second)
	if r, err := envoykit.Get(envoykit.URL(le.ports.Listener, "/"), 5*time.Second); err != nil || r.Code != 200 {
		t.Fatalf("after DrainNow the listener answers %d, %v; want 200", r.Code, err)
	}
	took, err := le.stop(t, 30*time.Second)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if took > 3*time.Second {
		t.Errorf("stop after DrainNow took %s; want at once", took)
	}
}

func TestDisableDrainingCutsADrainShort(t *testing.T) {
	t.Parallel()
	le := startAgent(t, agentOptions{termination: 20 * time.Second, minDrain: 20 * time.Second})
	// The second SIGTERM, once the drain has begun (DisableDraining before
	// it would skip the drain instead of cutting it).
	cut := make(chan bool, 1)
	go func() {
		began := envoykit.Eventually(10*time.Second, le.agent.Draining)
		le.agent.DisableDraining()
		cut <- began
	}()
	took, err := le.stop(t, 30*time.Second)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !<-cut {
		t.Errorf("the stop never began a drain")
	}
	if took > 4*time.Second {
		t.Errorf("a cut drain took %s", took)
	}
}

func TestCrashNote(t *testing.T) {
	for _, tc := range []struct {
		sig     syscall.Signal
		core    bool
		pattern string
		want    string
	}{
		{syscall.SIGSEGV, false, "core", "SIGSEGV; no core dumped: core dumps are off (LimitCORE= in the unit, ulimit -c) or the signal dumps none"},
		{syscall.SIGABRT, true, "|/usr/lib/systemd/systemd-coredump %P %u %g %s %t %c %h", "SIGABRT; core dumped: `coredumpctl info 42` shows it, `coredumpctl debug 42` opens it"},
		{syscall.SIGBUS, true, "core.%p", `SIGBUS; core dumped where the kernel's core_pattern "core.%p" puts it (relative to Envoy's working directory)`},
		{syscall.SIGQUIT, true, "", "SIGQUIT; core dumped"},
		{syscall.Signal(77), false, "", "signal 77; no core dumped: core dumps are off (LimitCORE= in the unit, ulimit -c) or the signal dumps none"},
	} {
		if got := crashNote(tc.sig, tc.core, 42, tc.pattern); got != tc.want {
			t.Errorf("crashNote(%v, %v, %q):\n got %s\nwant %s", tc.sig, tc.core, tc.pattern, got, tc.want)
		}
	}
}
