//go:build linux

package envoy

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/testenvoy"
)

// Envoy's graceful drain closes its listening sockets after its drain time
// (1 s here), while a request accepted on them runs on (3 s): the drain's
// kernel count must keep seeing that connection, so that a stop with
// exit_on_zero_active_connections lets the request finish. (It counted 0
// from the listeners' close on, inside the packaged unit and outside it
// alike; only Envoy's stats, 5 s late after a reload, kept the drain.)
func TestDrainOutlastsTheListenersClose(t *testing.T) {
	t.Parallel()
	le := startAgent(t, agentOptions{termination: 20 * time.Second, minDrain: 200 * time.Millisecond, exitOnZero: true, drainDuration: time.Second})
	req := slowRequest(le, 3*time.Second)
	waitActive(t, le, 1)
	stopped := le.stopAsync(30 * time.Second)
	r := <-req
	if r.err != nil || r.Code != 200 {
		t.Fatalf("the request in flight: code %d, %v; want 200 (the drain ended under it)", r.Code, r.err)
	}
	if sr := <-stopped; sr == nil || sr.err != nil {
		t.Fatalf("stop: %+v", sr)
	}
}

// After a hot restart, the old epoch's connection is counted from the
// kernel while its request runs and not a moment after it ended: the
// count no longer takes the larger of the kernel's and the stats', which
// still see the connection until the next stats flush (5 s).
func TestCountFollowsTheOldEpochsLastConnection(t *testing.T) {
	t.Parallel()
	le := startAgent(t, agentOptions{termination: 20 * time.Second, minDrain: time.Second, exitOnZero: true, drainDuration: time.Second})
	req := slowRequest(le, 3*time.Second)
	waitActive(t, le, 1)
	cfg := le.proxy.config()
	cfg.ConfigPath = le.bootstrap(t, "v1.yaml", "v1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	epoch, err := le.proxy.HotRestart(ctx, cfg)
	cancel()
	if err != nil || epoch != 1 {
		t.Fatalf("hot restart: epoch %d, %v", epoch, err)
	}
	// The old epoch has closed its copies of the listening sockets.
	if n, err := le.proxy.ActiveConnections(context.Background()); err != nil || n != 1 {
		t.Errorf("right after the reload: %d, %v; want the old epoch's 1", n, err)
	}
	r := <-req
	if r.err != nil || r.Code != 200 {
		t.Fatalf("the request on the old epoch: code %d, %v; want 200", r.Code, r.err)
	}
	// The client has its answer; Envoy closes its end at once (drain:
	// Connection: close). A few polls, far less than a stats flush.
	var counts []string
	if !testenvoy.Eventually(2*time.Second, func() bool {
		n, err := le.proxy.ActiveConnections(context.Background())
		counts = append(counts, strconv.Itoa(n))
		return err == nil && n == 0
	}) {
		t.Errorf("counts after the last request on the old epoch ended: %v; want 0 within 2 s", counts)
	}
	if n, err := le.proxy.admin.ActiveConnections(context.Background()); err == nil {
		t.Logf("Envoy's stats said %d at that moment", n)
	}
}
