//go:build linux

package conncount

import (
	"fmt"
	"net"
	"os"
	"testing"
)

// BenchmarkCountDownstreamSockets is the kernel count alone, on this test
// process's own sockets: N listeners on the loopback and 10 connections
// accepted on them. No Envoy: it starts in milliseconds where an Envoy with
// 10,000 listeners takes minutes on a loaded machine, and it reads what
// the drain poll reads (Envoy's workers each hold a copy of a listener with
// reuse_port, so Envoy's own tables are larger):
//
//	go test -run '^$' -bench CountDownstreamSockets -benchtime 200x ./envoy/conncount
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
				c := New(nil)
				for b.Loop() {
					if n, err := c.Count([]int{pid}, 0); err != nil || n != 10 {
						b.Fatalf("%d, %v; want 10", n, err)
					}
				}
				b.ReportMetric(float64(c.FullCounts()), "full-counts")
			})
			b.Run("full", func(b *testing.B) {
				for b.Loop() {
					if n, err := New(nil).Count([]int{pid}, 0); err != nil || n != 10 {
						b.Fatalf("%d, %v; want 10", n, err)
					}
				}
			})
		})
	}
}
