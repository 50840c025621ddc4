package envoykit

import (
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
)

// Ports below the kernel's ephemeral range (32768 and up by default): the
// many client connections a test or a benchmark opens take their local
// ports from that range, and could take a port between its check here and
// Envoy's bind.
const (
	portLow  = 10000
	portHigh = 32000
)

var (
	handedOutMu sync.Mutex
	handedOut   = map[int]bool{} // never hand the same port out twice in one process
)

// FreePort returns a TCP port on 127.0.0.1 below the ephemeral range that
// was free a moment ago (freePort); it fails the test when there is none.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago,
// that this process has not handed out before and that no other process
// running this kit holds (reserve): go test runs the packages' test
// binaries side by side, and a port free when one of them checked it could
// be the one another had just checked too.
func freePort() (int, error) {
	for range 1000 {
		port := portLow + rand.IntN(portHigh-portLow)
		handedOutMu.Lock()
		taken := handedOut[port]
		handedOutMu.Unlock()
		if taken {
			continue
		}
		if !reserve("port", port) {
			continue // another test process holds it
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		ln.Close()
		handedOutMu.Lock()
		handedOut[port] = true
		handedOutMu.Unlock()
		return port, nil
	}
	return 0, errors.New("no free port below 32000 after 1000 tries")
}

// FreePorts returns n distinct free ports.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	return ports, nil
}

// BaseID returns a hot-restart base id unlikely to collide with another
// Envoy on the host (hot restart's domain sockets and shared memory are
// named after it, host-wide).
// No two processes running this kit hand out the same one (reserve).
func BaseID() uint32 {
	for {
		id := 1000 + rand.Uint32N(60000)
		if reserve("base-id", int(id)) {
			return id
		}
	}
}

// Ports are the ports of one Envoy and its agent.
type Ports struct {
	Admin, Listener, Upstream, Status, Prometheus int
}

// NewPorts picks free ports for everything but the upstream; it fails the
// test when there are none.
func NewPorts(t testing.TB) Ports {
	t.Helper()
	p, err := newPorts()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newPorts picks free ports for everything but the upstream.
func newPorts() (Ports, error) {
	ps, err := FreePorts(4)
	if err != nil {
		return Ports{}, err
	}
	return Ports{Admin: ps[0], Listener: ps[1], Status: ps[2], Prometheus: ps[3]}, nil
}
