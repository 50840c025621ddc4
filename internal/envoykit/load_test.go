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

	"github.com/envoy-agent/envoy-agent/internal/hostfiles"
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

// A server that closes a kept-alive connection once it has been idle for
// 100 ms, and clients that pause 300 ms between requests: Go's client sees
// the close before it reuses the connection and fails nothing; the raw
// HTTP/1.1 client, as Python's http.client, writes on the closed
// connection and fails, on an idle connection only, without retrying.
func TestLoadKindsOnAServerThatClosesIdleConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{IdleTimeout: 100 * time.Millisecond, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "ok\n")
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/"
	tests := []struct {
		name       string
		o          LoadOptions
		failedIdle bool // want failures, all on idle connections
	}{
		{"Go's client", LoadOptions{URL: url, Rate: 3, Connections: 1}, false}, // a request every 333 ms
		{"raw HTTP/1.1", LoadOptions{URL: url, Client: RawHTTP1, Workers: []Workers{{N: 1, Idle: 300 * time.Millisecond}}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.o.Duration, tt.o.Timeout = 1500*time.Millisecond, 2*time.Second
			l := StartLoad(tt.o)
			samples := l.Wait()
			t.Logf("%s", l)
			if l.OK() == 0 || l.OK()+l.Failed() != int64(len(samples)) || l.FailedInFlight() != 0 || l.Retried() != 0 {
				t.Fatalf("%s over %d samples; want answers, no failure in flight, no retry", l, len(samples))
			}
			if got := l.FailedIdle() > 0; got != tt.failedIdle {
				t.Fatalf("%s; want failures on idle connections: %v", l, tt.failedIdle)
			}
		})
	}
}

// Through a real Envoy, a steady load of each client kind all succeeds and
// carries the bootstrap's x-config-version.
func TestLoadThroughEnvoy(t *testing.T) {
	if UnitTier() {
		t.Skip("runs the real Envoy: make test")
	}
	bin, err := FindEnvoy("")
	if err != nil {
		t.Fatal(err)
	}
	up, err := StartUpstream()
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	ports := NewPorts(t)
	ports.Upstream = up.Port
	path := WriteBootstrap(t, t.TempDir(), "envoy.yaml", BootstrapOptions{Ports: ports, ResponseHeader: "v7"})
	baseID := BaseID()
	env, err := StartEnvoy(bin, path, baseID, t.Output())
	if err != nil {
		t.Fatal(err)
	}
	defer env.Kill()
	if err := env.WaitReady(ports.Admin, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/", ports.Listener)
	workers := []Workers{{N: 1, Idle: 10 * time.Millisecond}, {N: 1, Path: "/slow?d=100ms"}}
	for _, o := range []LoadOptions{
		{URL: url, Rate: 100, Connections: 2},
		{URL: url, Client: RawHTTP1, Workers: workers},
		{URL: url, Client: H2C, Workers: workers},
	} {
		t.Run(o.Client.String(), func(t *testing.T) {
			o.Duration, o.Timeout = time.Second, 2*time.Second
			l := StartLoad(o)
			samples := l.Wait()
			t.Logf("%s", l)
			if len(samples) < 50 {
				t.Fatalf("only %d requests sent in a second", len(samples))
			}
			for _, s := range samples {
				if !s.OK || s.Version != "v7" {
					t.Fatalf("request at %s: ok=%v err=%q version=%q (%q)", s.At, s.OK, s.Err, s.Version, l.Errors())
				}
			}
			if l.Latest() != "v7" || l.Versions()["v7"] != len(samples) {
				t.Fatalf("latest %q, versions %v; want every answer v7", l.Latest(), l.Versions())
			}
		})
	}
	if !strings.Contains(fmt.Sprint(env.Args), "--base-id") {
		t.Errorf("a kit Envoy runs with a base id of its own: %v", env.Args)
	}
	env.Kill()
	if _, err := os.Stat(hostfiles.SharedMemoryPath(baseID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the killed Envoy's shared memory is left behind: %v", err)
	}
}
