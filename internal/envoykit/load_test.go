package envoykit

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy/hostfiles"
)

// A server that answers the first request on a connection and closes the
// connection when the second one arrives, without answering: Go's client
// then sends the second request again on a new connection. The load must
// count that request as failed, as a client that does not retry sees it.
func TestLoadCountsSilentRetriesAsFailures(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				if _, err := http.ReadRequest(r); err != nil {
					return
				}
				fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
				_, _ = http.ReadRequest(r) // then close, unanswered
			}()
		}
	}()
	l := StartLoad(LoadOptions{URL: "http://" + ln.Addr().String() + "/", Rate: 50, Connections: 1, Duration: time.Second, Timeout: 2 * time.Second})
	samples := l.Wait()
	var ok, retried int
	for _, s := range samples {
		switch {
		case s.OK:
			ok++
		case s.Err == "retried":
			retried++
		default:
			t.Errorf("unexpected failure %q", s.Err)
		}
	}
	if ok == 0 || retried == 0 || int64(retried) != l.Retried() {
		t.Fatalf("%d ok, %d retried (counter %d) of %d; want both kinds", ok, retried, l.Retried(), len(samples))
	}
}

// Through a real Envoy, a steady load all succeeds and carries the
// bootstrap's x-config-version.
func TestLoadThroughEnvoy(t *testing.T) {
	bin, err := FindEnvoy("")
	if err != nil {
		t.Fatal(err)
	}
	up, err := StartUpstream()
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	ports, err := NewPorts()
	if err != nil {
		t.Fatal(err)
	}
	ports.Upstream = up.Port
	path, err := WriteBootstrap(t.TempDir(), "envoy.yaml", BootstrapOptions{Ports: ports, ResponseHeader: "v7"})
	if err != nil {
		t.Fatal(err)
	}
	baseID := BaseID()
	env, err := StartEnvoy(bin, path, baseID, t.Output())
	if err != nil {
		t.Fatal(err)
	}
	defer env.Kill()
	if err := env.WaitReady(ports.Admin, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	l := StartLoad(LoadOptions{URL: fmt.Sprintf("http://127.0.0.1:%d/", ports.Listener), Rate: 100, Connections: 2, Duration: time.Second, Timeout: 2 * time.Second})
	samples := l.Wait()
	if len(samples) < 50 {
		t.Fatalf("only %d requests sent in a second at 100/s", len(samples))
	}
	for _, s := range samples {
		if !s.OK || s.Version != "v7" {
			t.Fatalf("request at %s: ok=%v err=%q version=%q", s.At, s.OK, s.Err, s.Version)
		}
	}
	if !strings.Contains(fmt.Sprint(env.Args), "--base-id") {
		t.Errorf("a kit Envoy runs with a base id of its own: %v", env.Args)
	}
	env.Kill()
	if _, err := os.Stat(hostfiles.SharedMemoryPath(baseID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the killed Envoy's shared memory is left behind: %v", err)
	}
}
