package main

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync/atomic"
)

// freePorts returns n distinct TCP ports on 127.0.0.1 that were free a
// moment ago: it holds all n open at once so that none repeats.
func freePorts(n int) ([]int, error) {
	lns := make([]net.Listener, 0, n)
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// nextBaseID hands out hot-restart base ids: random per run, distinct within
// it, so that no two Envoys on the host (other engineers' included) share
// the shared memory and domain sockets of hot restart.
var nextBaseID atomic.Uint32

func init() { nextBaseID.Store(100000 + rand.Uint32N(400000)*8) }

func newBaseID() uint32 { return nextBaseID.Add(1) }
