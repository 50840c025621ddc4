//go:build linux

package envoy

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
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
	if !envoykit.Eventually(2*time.Second, func() bool {
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

// BenchmarkCountConnections compares one drain poll's count from the
// kernel (Envoy.ActiveConnections, the drain poll) with the admin API's
// gauges (the poll once read both and took the larger), for a
// real Envoy with 10, 1000 and 10000 listeners and 10 connections held
// open:
//
//	go test -run '^$' -bench CountConnections -benchtime 200x ./envoy
func BenchmarkCountConnections(b *testing.B) {
	for _, listeners := range []int{10, 1000, 10000} {
		b.Run(fmt.Sprintf("listeners=%d", listeners), func(b *testing.B) {
			up := envoykit.NewUpstream(b)
			ports := envoykit.NewPorts(b)
			ports.Upstream = up.Port
			var extra []int
			for range listeners - 1 {
				extra = append(extra, envoykit.FreePort(b))
			}
			dir := b.TempDir()
			p := NewEnvoy(ProxyConfig{
				BinaryPath: envoykit.Binary(b), AdminPort: int32(ports.Admin),
				ConfigPath:    envoykit.WriteBootstrap(b, dir, "envoy.yaml", envoykit.BootstrapOptions{Ports: ports, ExtraListeners: extra}),
				DrainDuration: durationpb.New(time.Second), BaseID: envoykit.BaseID(), Concurrency: 1, LogLevel: "warning", RunDir: dir,
			})
			abort := make(chan error, 1)
			done := make(chan error, 1)
			go func() { done <- p.Run(abort) }()
			b.Cleanup(func() { abort <- errAbort; <-done; p.Cleanup() })
			if !envoykit.Eventually(180*time.Second, func() bool { r, err := p.Admin().Ready(context.Background()); return err == nil && r.Live }) {
				b.Fatal("envoy never became LIVE")
			}
			for i := range 10 {
				port := ports.Listener
				if i < len(extra) {
					port = extra[i]
				}
				c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { c.Close() })
			}
			if !envoykit.Eventually(10*time.Second, func() bool { n, err := p.ActiveConnections(context.Background()); return err == nil && n == 10 }) {
				n, err := p.ActiveConnections(context.Background())
				b.Fatalf("kernel count %d, %v; want 10", n, err)
			}
			b.Run("kernel", func(b *testing.B) {
				for b.Loop() {
					if n, err := p.countConnections(nil); err != nil || n != 10 {
						b.Fatalf("%d, %v", n, err)
					}
				}
			})
			b.Run("stats", func(b *testing.B) {
				for b.Loop() {
					if _, err := p.admin.ActiveConnections(context.Background()); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
