//go:build linux

package envoy

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/envoy-agent/envoy-agent/internal/testenvoy"
)

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
			up := testenvoy.NewUpstream(b)
			ports := testenvoy.NewPorts(b)
			ports.Upstream = up.Port
			var extra []int
			for range listeners - 1 {
				extra = append(extra, testenvoy.FreePort(b))
			}
			dir := b.TempDir()
			p := NewEnvoy(ProxyConfig{
				BinaryPath: testenvoy.Binary(b), AdminPort: int32(ports.Admin),
				ConfigPath:    testenvoy.WriteBootstrap(b, dir, "envoy.yaml", testenvoy.BootstrapOptions{Ports: ports, ExtraListeners: extra}),
				DrainDuration: durationpb.New(time.Second), BaseID: testenvoy.BaseID(), Concurrency: 1, LogLevel: "warning", RunDir: dir,
			})
			abort := make(chan error, 1)
			done := make(chan error, 1)
			go func() { done <- p.Run(abort) }()
			b.Cleanup(func() { abort <- errAbort; <-done; p.Cleanup() })
			if !testenvoy.Eventually(180*time.Second, func() bool { r, err := p.Admin().Ready(context.Background()); return err == nil && r.Live }) {
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
			if !testenvoy.Eventually(10*time.Second, func() bool { n, err := p.ActiveConnections(context.Background()); return err == nil && n == 10 }) {
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

// BenchmarkCountDownstreamSockets is the kernel count alone, on this test
// process's own sockets: N listeners on the loopback and 10 connections
// accepted on them. No Envoy: it starts in milliseconds where an Envoy with
// 10,000 listeners takes minutes on a loaded machine, and it reads what
// the drain poll reads (Envoy's workers each hold a copy of a listener with
// reuse_port, so Envoy's own tables are larger):
//
//	go test -run '^$' -bench CountDownstreamSockets -benchtime 200x ./envoy
func BenchmarkCountDownstreamSockets(b *testing.B) {
	for _, listeners := range []int{10, 1000, 10000} {
		b.Run(fmt.Sprintf("listeners=%d", listeners), func(b *testing.B) {
			var lns []net.Listener
			for range listeners {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				lns = append(lns, ln)
				b.Cleanup(func() { ln.Close() })
			}
			for _, ln := range lns[:10] {
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { c.Close() })
				s, err := ln.Accept()
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { s.Close() })
			}
			pid := os.Getpid()
			// The 10 accepted ends count; the 10 client ends are this
			// process's too but not on a listening address. "poll" is the
			// drain poll (quick counts, a full one every fullCountEvery);
			// "full" a count with nothing remembered.
			b.Run("poll", func(b *testing.B) {
				c := NewDownstreamCounter()
				for b.Loop() {
					if n, err := c.Count([]int{pid}, 0); err != nil || n != 10 {
						b.Fatalf("%d, %v; want 10", n, err)
					}
				}
				b.ReportMetric(float64(c.FullCounts()), "full-counts")
			})
			b.Run("full", func(b *testing.B) {
				for b.Loop() {
					if n, err := NewDownstreamCounter().Count([]int{pid}, 0); err != nil || n != 10 {
						b.Fatalf("%d, %v; want 10", n, err)
					}
				}
			})
		})
	}
}
