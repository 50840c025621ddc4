//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy/adminapi"
	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

func TestTenReloadsUnderLoadDropNothing(t *testing.T) {
	t.Parallel()
	p := startAgent(t, procOptions{envoy: quickDrain, bootstrap: envoykit.BootstrapOptions{ResponseHeader: "v0"}})
	l := envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: envoykit.URL(p.ports.Listener, "/"), Connections: 4})
	defer l.Stop()
	envoykit.WaitAnswers(t, l, 20)
	var took []time.Duration
	for i := 1; i <= 10; i++ {
		p.rewriteBootstrap(envoykit.BootstrapOptions{ResponseHeader: fmt.Sprintf("v%d", i)})
		start := time.Now()
		code, out := p.reload()
		took = append(took, time.Since(start))
		if code != 0 || !strings.Contains(out, fmt.Sprintf("reloaded: epoch %d is serving", i)) {
			t.Fatalf("reload %d: exit %d: %s", i, code, out)
		}
		time.Sleep(200 * time.Millisecond) // the scenario: reloads 200ms apart
	}
	envoykit.Eventually(10*time.Second, func() bool { return l.Latest() == "v10" })
	l.Stop()
	t.Logf("10 reloads, envoy-agent reload took %v; %d requests ok, %d failed; answers %v", took, l.OK(), l.Failed(), l.Versions())
	if l.Failed() != 0 {
		t.Fatalf("%d of %d requests failed across 10 reloads (last: %s)", l.Failed(), l.OK()+l.Failed(), l.LastErr())
	}
	if l.Latest() != "v10" || l.Versions()["v10"] == 0 {
		t.Fatalf("the answers did not switch to v10: latest %q, %v", l.Latest(), l.Versions())
	}
	if got := p.metric("envoy_agent_envoy_epoch"); got != "10" {
		t.Errorf("envoy_agent_envoy_epoch = %q, want 10", got)
	}
	if got := p.metric("envoy_agent_reloads_total"); got != "10" {
		t.Errorf("envoy_agent_reloads_total = %q, want 10", got)
	}
	// Each reload spoke the notify-reload protocol: RELOADING=1 with
	// MONOTONIC_USEC in the same datagram, then READY=1.
	reloading, ready := 0, 0
	for _, m := range p.ns.Messages() {
		if envoykit.HasAssignment(m.Text, "RELOADING=1") {
			reloading++
			if !envoykit.HasAssignment(m.Text, "MONOTONIC_USEC=") {
				t.Errorf("RELOADING=1 without MONOTONIC_USEC: %q", m.Text)
			}
		}
		if envoykit.HasAssignment(m.Text, "READY=1") {
			ready++
		}
	}
	if reloading != 10 || ready != 11 {
		t.Errorf("%d RELOADING=1 and %d READY=1; want 10 and 11", reloading, ready)
	}
	sent := p.signal(syscall.SIGTERM)
	if code, _ := p.wait(sent, 20*time.Second); code != 0 {
		t.Fatalf("stop after reloads exited %d", code)
	}
	assertNoEnvoyFor(t, p.dir)
}

func TestFailedReloadsKeepTheServingEnvoy(t *testing.T) {
	t.Parallel()
	p := startAgent(t, procOptions{envoy: quickDrain, bootstrap: envoykit.BootstrapOptions{ResponseHeader: "good-0"}})
	l := envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: envoykit.URL(p.ports.Listener, "/"), Connections: 4})
	defer l.Stop()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	config, err := os.ReadFile(p.config)
	if err != nil {
		t.Fatal(err)
	}
	bootstrap := filepath.Join(p.dir, "envoy.yaml")
	good, err := os.ReadFile(bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		break_ func()
		code   int
		want   string
	}{
		{"bootstrap fails validation", func() {
			writeFile(t, bootstrap, strings.Replace(string(good), "type: STATIC", "type: NOT_A_TYPE", 1))
		}, 3, "Envoy rejects this bootstrap"},
		{"bootstrap valid but its listener port is taken", func() {
			ports := p.ports
			ports.Listener = taken.Addr().(*net.TCPAddr).Port
			envoykit.WriteBootstrap(t, p.dir, "envoy.yaml", envoykit.BootstrapOptions{Ports: ports, ResponseHeader: "bad"})
		}, 1, "Address already in use"},
		{"toml error", func() {
			writeFile(t, p.config, string(config)+"\nbogus_key = 1\n")
		}, 3, "bogus_key: unknown key"},
		{"a setting that needs a restart", func() {
			writeFile(t, p.config, strings.Replace(string(config), "base_id = ", "base_id = 1", 1))
		}, 3, "a reload cannot change envoy.base_id"},
	}
	for i, tt := range tests {
		tt.break_()
		code, out := p.reload()
		writeFile(t, p.config, string(config))
		writeFile(t, bootstrap, string(good))
		if code != tt.code || !strings.Contains(out, tt.want) || !strings.Contains(out, "keeps serving") {
			t.Errorf("%s: reload exit %d: %s\nwant exit %d with %q", tt.name, code, out, tt.code, tt.want)
		}
		if c := p.healthz(); c != 200 {
			t.Errorf("%s: /healthz/ready = %d after the failed reload", tt.name, c)
		}
		if r, err := envoykit.Get(envoykit.URL(p.ports.Admin, "/ready"), time.Second); err != nil || r.Code != 200 {
			t.Errorf("%s: Envoy's admin API after the failed reload: %+v %v", tt.name, r, err)
		}
		envoykit.WaitAnswers(t, l, 20) // answers given after the failed reload
		if v := l.Latest(); v != "good-0" {
			t.Errorf("%s (%d): the answers say %q, want the old good-0", tt.name, i, v)
		}
	}
	// A good reload still works afterwards.
	p.rewriteBootstrap(envoykit.BootstrapOptions{ResponseHeader: "good-1"})
	if code, out := p.reload(); code != 0 {
		t.Fatalf("good reload after failures: exit %d: %s", code, out)
	}
	envoykit.Eventually(10*time.Second, func() bool { return l.Latest() == "good-1" })
	l.Stop()
	if l.Failed() != 0 {
		t.Fatalf("%d requests failed (last: %s)", l.Failed(), l.LastErr())
	}
	if l.Latest() != "good-1" || l.Versions()["bad"] != 0 {
		t.Fatalf("answers %v, latest %q; want good-1 and never bad", l.Versions(), l.Latest())
	}
	if got := p.metric("envoy_agent_reload_failures_total"); got != "4" {
		t.Errorf("envoy_agent_reload_failures_total = %q, want 4", got)
	}
	// And a stop still drains properly.
	sent := p.signal(syscall.SIGTERM)
	if code, took := p.wait(sent, 20*time.Second); code != 0 || took < time.Second {
		t.Fatalf("stop after failed reloads: exit %d after %s; want 0 after min_drain_duration 1s", code, took)
	}
	assertNoEnvoyFor(t, p.dir)
}

func TestSighupAndConcurrentReloads(t *testing.T) {
	t.Parallel()
	p := startAgent(t, procOptions{envoy: quickDrain, bootstrap: envoykit.BootstrapOptions{ResponseHeader: "v0"}})
	l := envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: envoykit.URL(p.ports.Listener, "/"), Connections: 2})
	defer l.Stop()

	p.rewriteBootstrap(envoykit.BootstrapOptions{ResponseHeader: "hup"})
	p.signal(syscall.SIGHUP)
	p.ns.WaitFor(t, "RELOADING=1", 5*time.Second)
	if !envoykit.Eventually(20*time.Second, func() bool { return p.metric("envoy_agent_reloads_total") == "1" }) {
		t.Fatalf("SIGHUP did not reload: %s", p.stderr)
	}
	if !envoykit.Eventually(5*time.Second, func() bool { return l.Latest() == "hup" }) {
		t.Fatalf("after SIGHUP the answers say %q", l.Latest())
	}

	// Five reloads asked at once: all succeed, coalesced into fewer runs.
	p.rewriteBootstrap(envoykit.BootstrapOptions{ResponseHeader: "burst"})
	var wg sync.WaitGroup
	codes := make([]int, 5)
	for i := range codes {
		wg.Add(1)
		go func() { defer wg.Done(); codes[i], _ = p.reload() }()
	}
	wg.Wait()
	for i, c := range codes {
		if c != 0 {
			t.Errorf("concurrent reload %d exited %d", i, c)
		}
	}
	runs := p.metric("envoy_agent_reloads_total")
	if runs != "2" && runs != "3" {
		t.Errorf("envoy_agent_reloads_total = %s after 1 + 5 concurrent requests; want them coalesced into 1 or 2 runs", runs)
	}
	envoykit.Eventually(10*time.Second, func() bool { return l.Latest() == "burst" })
	l.Stop()
	if l.Failed() != 0 || l.Latest() != "burst" {
		t.Fatalf("%d failed, latest %q", l.Failed(), l.Latest())
	}
}

func TestStopDuringReloadDrainsAndLeavesNoEnvoy(t *testing.T) {
	t.Parallel()
	p := startAgent(t, procOptions{envoy: quickDrain, agent: map[string]string{"min_drain_duration": `"1s"`, "termination_drain_duration": `"3s"`}})
	// The next epoch takes 2s to initialise.
	p.rewriteBootstrap(envoykit.BootstrapOptions{InitDelay: 2 * time.Second, ResponseHeader: "slow"})
	reloaded := make(chan string, 1)
	go func() { _, out := p.reload(); reloaded <- out }()
	p.ns.WaitFor(t, "RELOADING=1", 5*time.Second)
	// The stop comes while epoch 1 runs and initialises (its command line
	// names its bootstrap copy, run/epoch-1-…).
	if !envoykit.Eventually(10*time.Second, func() bool { return len(processesMentioning(filepath.Join(p.dir, "run", "epoch-1-"))) > 0 }) {
		t.Fatalf("epoch 1 never started: %s", p.stderr)
	}
	sent := p.signal(syscall.SIGTERM)
	code, took := p.wait(sent, 30*time.Second)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	if took < 2*time.Second {
		t.Errorf("stopped %s after SIGTERM; want the reload (2s) finished and a drain after it", took)
	}
	if out := <-reloaded; !strings.Contains(out, "reloaded: epoch 1") {
		t.Errorf("the reload under way did not finish: %s", out)
	}
	assertNoEnvoyFor(t, p.dir)
}

// inPlaceAgent is reload_method "auto" with quick drains.
func inPlaceAgent(t *testing.T, bo envoykit.BootstrapOptions) *agentProc {
	t.Helper()
	return startAgent(t, procOptions{envoy: quickDrain, agent: map[string]string{"reload_method": `"auto"`, "exit_on_zero_active_connections": "true"}, bootstrap: bo})
}

// writeBootstrapText replaces the agent's bootstrap with text, atomically.
func (p *agentProc) writeBootstrapText(text string) {
	p.t.Helper()
	if err := envoykit.WriteFileAtomic(filepath.Join(p.dir, "envoy.yaml"), []byte(text)); err != nil {
		p.t.Fatal(err)
	}
}

// reloadTook is the time `envoy-agent reload` printed, "(N ms)".
func reloadTook(out string) string {
	if m := tookRE.FindStringSubmatch(out); m != nil {
		return m[1] + " ms"
	}
	return "?"
}

var tookRE = regexp.MustCompile(`\((\d+) ms\)`)

// TestReloadInPlace: with reload_method "auto", a tcp_proxy listener is
// added in place and its connection outlives the later reloads; a route change is served
// by the same Envoy process under a load that does not retry, with 0
// failed requests, and idle keep-alive connections to the other listener
// keep answering; an unchanged bootstrap says so; a change Envoy rejects
// (a new listener on a port another socket holds, with a cluster changed
// too) is refused with every resource as before; a change to the node
// hot-restarts into a new epoch, which again changes in place, without
// waiting for the replaced epoch's drain.
func TestReloadInPlace(t *testing.T) {
	t.Parallel()
	other := envoykit.FreePort(t)
	bo := envoykit.BootstrapOptions{ResponseHeader: "v0", ExtraListeners: []int{other}}
	p := inPlaceAgent(t, bo)
	first := p.servingPid()
	bo.Ports = p.ports
	kit, err := envoykit.RenderBootstrap(bo)
	if err != nil {
		t.Fatal(err)
	}
	// A listener added in place: tcp_proxy to the upstream.
	tcpPort := envoykit.FreePort(t)
	v0 := []byte(strings.Replace(string(kit), "  clusters:\n", fmt.Sprintf(`  - name: tcp
    address: { socket_address: { address: 127.0.0.1, port_value: %d } }
    filter_chains: [{ filters: [{ name: envoy.filters.network.tcp_proxy, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: tcp, cluster: upstream } }] }]
  clusters:
`, tcpPort), 1))
	p.writeBootstrapText(string(v0))
	if code, out := p.reload(); code != 0 || !strings.Contains(out, "reloaded in place: listeners added tcp; epoch 0 keeps serving") {
		t.Fatalf("reload adding a tcp_proxy listener: exit %d: %s", code, out)
	}
	tcp, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", tcpPort))
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	tcpReader := bufio.NewReader(tcp)
	tcpGet := func() error { // an HTTP/1.1 request to the upstream, through the kept TCP connection
		_ = tcp.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(tcp, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(tcpReader, nil)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	if err := tcpGet(); err != nil {
		t.Fatalf("through the tcp_proxy listener: %v", err)
	}
	// version i changes the first listener's route only.
	version := func(text string, i int) string {
		return strings.Replace(text, `value: "v0"`, fmt.Sprintf(`value: "v%d"`, i), 1)
	}
	l := envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: envoykit.URL(p.ports.Listener, "/"), Client: envoykit.RawHTTP1,
		Workers: []envoykit.Workers{{N: 4, Path: "/"}}})
	defer l.Stop()
	idle := envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: envoykit.URL(other, "/"), Client: envoykit.RawHTTP1,
		Workers: []envoykit.Workers{{N: 4, Path: "/", Idle: 700 * time.Millisecond}}})
	defer idle.Stop()
	envoykit.WaitAnswers(t, l, 20)
	envoykit.WaitAnswers(t, idle, 4)
	const reloads = 10
	var inPlace []string
	for i := 1; i <= reloads; i++ {
		p.writeBootstrapText(version(string(v0), i))
		code, out := p.reload()
		if code != 0 || !strings.Contains(out, "reloaded in place: routes updated ingress/0/0; epoch 0 keeps serving") {
			t.Fatalf("reload %d: exit %d: %s", i, code, out)
		}
		inPlace = append(inPlace, reloadTook(out))
		if !envoykit.Eventually(5*time.Second, func() bool { return l.Latest() == fmt.Sprintf("v%d", i) }) {
			t.Fatalf("after reload %d the listener answers %q", i, l.Latest())
		}
	}
	if pid := p.servingPid(); pid != first || !envoykit.Alive(first) {
		t.Fatalf("after in-place reloads Envoy pid %d serves; want pid %d", pid, first)
	}
	// The connection then stays idle past parent_shutdown_duration (2 s
	// here), when a hot restart's old epoch would have closed it: this wait
	// is the scenario's idle time, not a wait for something to happen.
	idleSince := time.Now()
	<-time.After(3 * time.Second)
	if err := tcpGet(); err != nil {
		t.Errorf("the tcp_proxy connection on the unchanged listener after %d in-place reloads and %s idle: %v", reloads, time.Since(idleSince).Round(time.Millisecond), err)
	}
	if code, out := p.reload(); code != 0 || !strings.Contains(out, "reloaded in place: nothing changed; epoch 0 keeps serving") {
		t.Fatalf("reload of the same files: exit %d: %s", code, out)
	}
	if code, stdout, stderr := runAgent(t, "status", "--config", p.config); code != 0 || !strings.Contains(stdout, "ok in place in") || !strings.Contains(stdout, "(nothing changed), epoch 0 serving") {
		t.Errorf("envoy-agent status: exit %d: %s%s", code, stdout, stderr)
	}

	// Rejected: a listener on a taken port, and the cluster changed.
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	last := version(string(v0), reloads)
	bad := strings.Replace(last, "connect_timeout: 1s", "connect_timeout: 2s", 1)
	bad = strings.Replace(bad, "  clusters:\n", fmt.Sprintf(`  - name: taken
    address: { socket_address: { address: 127.0.0.1, port_value: %d } }
    filter_chains: [{ filters: [{ name: envoy.filters.network.tcp_proxy, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: t, cluster: upstream } }] }]
  clusters:
`, held.Addr().(*net.TCPAddr).Port), 1)
	p.writeBootstrapText(bad)
	if code, out := p.reload(); code == 0 || !strings.Contains(out, "listener taken: cannot bind") || !strings.Contains(out, "put back") {
		t.Fatalf("reload with a listener on a taken port: exit %d: %s", code, out)
	}
	if r, err := envoykit.Get(envoykit.URL(p.ports.Admin, "/listeners"), 5*time.Second); err != nil || strings.Contains(r.Body, "taken") || !strings.Contains(r.Body, "ingress_1") {
		t.Errorf("Envoy's listeners after the refused reload: %v\n%s", err, r.Body)
	}
	if r, err := envoykit.Get(envoykit.URL(p.ports.Admin, "/config_dump?resource=dynamic_active_clusters"), 5*time.Second); err != nil ||
		!strings.Contains(r.Body, `"connect_timeout": "1s"`) || strings.Contains(r.Body, `"connect_timeout": "2s"`) {
		t.Errorf("the upstream cluster after the refused reload is not as before: %v\n%s", err, r.Body)
	}
	if v, want := p.answer(), fmt.Sprintf("v%d", reloads); v != want {
		t.Errorf("after the refused reload Envoy answers %q, want %s", v, want)
	}
	if got := p.metric(`envoy_agent_reloads_in_place_total{outcome="failed"}`); got != "1" {
		t.Errorf(`envoy_agent_reloads_in_place_total{outcome="failed"} = %q, want 1`, got)
	}

	// A change to the node is a hot restart; the new epoch changes in place again.
	p.writeBootstrapText(strings.Replace(version(string(v0), reloads+1), "id: envoy-agent-kit", "id: envoy-agent-kit-2", 1))
	code, out := p.reload()
	if code != 0 || !strings.Contains(out, "reloaded: epoch 1 is serving") || !strings.Contains(out, "hot restart: node changed") {
		t.Fatalf("reload of a node change: exit %d: %s", code, out)
	}
	hotRestart := reloadTook(out)
	second := p.servingPid()
	if second == first {
		t.Fatalf("the node change did not start a new Envoy (pid %d)", second)
	}
	p.writeBootstrapText(strings.Replace(version(string(v0), reloads+2), "id: envoy-agent-kit", "id: envoy-agent-kit-2", 1))
	code, out = p.reload()
	if code != 0 || !strings.Contains(out, "reloaded in place: routes updated ingress/0/0; epoch 1 keeps serving") || strings.Contains(out, "waiting for epoch 0") {
		t.Fatalf("in-place reload after the hot restart: exit %d: %s", code, out)
	}
	inPlace = append(inPlace, reloadTook(out))
	if !envoykit.Eventually(5*time.Second, func() bool { return l.Latest() == fmt.Sprintf("v%d", reloads+2) }) {
		t.Fatalf("after the last reload the listener answers %q", l.Latest())
	}
	l.Stop()
	idle.Stop()
	t.Logf("envoy-agent reload took in place %v, hot restart %s; load %d ok, %d failed %v; idle keep-alive load %d ok, %d failed",
		inPlace, hotRestart, l.OK(), l.Failed(), l.Versions(), idle.OK(), idle.Failed())
	if l.Failed() != 0 || idle.Failed() != 0 {
		t.Errorf("failed requests: %d on the changed listener (last: %s), %d on the idle keep-alive connections (last: %s)", l.Failed(), l.LastErr(), idle.Failed(), idle.LastErr())
	}
	if got, want := p.metric(`envoy_agent_reloads_in_place_total{outcome="ok"}`), strconv.Itoa(reloads+3); got != want {
		t.Errorf(`envoy_agent_reloads_in_place_total{outcome="ok"} = %q, want %s`, got, want)
	}
	sent := p.signal(syscall.SIGTERM)
	if code, _ := p.wait(sent, 20*time.Second); code != 0 {
		t.Fatalf("stop exited %d", code)
	}
	assertNoEnvoyFor(t, p.dir)
	if left, _ := filepath.Glob(filepath.Join(p.dir, "run", "epoch-*")); len(left) > 0 {
		t.Errorf("the stop left %v", left)
	}
}

// TestInPlaceStartWaitsForAcceptance: with reload_method "auto", Envoy is
// LIVE even when it rejects a listener of its LDS file; the agent refuses
// that start as a static bootstrap's start fails (port taken).
func TestInPlaceStartWaitsForAcceptance(t *testing.T) {
	t.Parallel()
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	p := startAgent(t, procOptions{agent: map[string]string{"reload_method": `"auto"`}, noWaitReady: true,
		bootstrap: envoykit.BootstrapOptions{ExtraListeners: []int{held.Addr().(*net.TCPAddr).Port}}})
	code, _ := p.wait(p.started, 30*time.Second)
	if code != 1 || !strings.Contains(p.stderr.String(), "without all of its listeners, clusters, routes and secrets") || !strings.Contains(p.stderr.String(), "cannot bind") {
		t.Fatalf("start with a listener on a taken port exited %d:\n%s", code, p.stderr)
	}
	for _, m := range p.ns.Messages() {
		if envoykit.HasAssignment(m.Text, "READY=1") {
			t.Errorf("READY=1 sent: %q", m.Text)
		}
	}
	assertNoEnvoyFor(t, p.dir)
}

// TestInPlaceListenerChangeHotRestarts: with reload_method unset (the
// default, "auto"), a change of a listener's routes alone is a route update in place, which a
// request in flight through it outlives; a change of a listener beside its
// routes is a hot restart, not a listener update in place: in place, Envoy
// would cut a request in flight through it after drain_duration (1s here);
// the hot restart lets it run until parent_shutdown_duration (4s), as
// every reload did before.
func TestInPlaceListenerChangeHotRestarts(t *testing.T) {
	t.Parallel()
	p := startAgent(t, procOptions{envoy: map[string]string{"drain_duration": `"1s"`, "parent_shutdown_duration": `"4s"`},
		agent: map[string]string{"reload_method": ""}, bootstrap: envoykit.BootstrapOptions{ResponseHeader: "v0"}})
	v0, err := envoykit.RenderBootstrap(envoykit.BootstrapOptions{Ports: p.ports, ResponseHeader: "v0"})
	if err != nil {
		t.Fatal(err)
	}
	// slow sends a 2s request and returns its outcome once it is in flight.
	slow := func() <-chan error {
		done := make(chan error, 1)
		before := p.upstream.SlowInFlight()
		go func() {
			r, err := envoykit.Get(envoykit.URL(p.ports.Listener, "/slow?d=2s"), 10*time.Second)
			if err == nil && r.Code != http.StatusOK {
				err = fmt.Errorf("status %d", r.Code)
			}
			done <- err
		}()
		if !envoykit.Eventually(10*time.Second, func() bool { return p.upstream.SlowInFlight() > before }) {
			t.Fatalf("the slow request never reached the upstream")
		}
		return done
	}
	// Routes alone: in place, and the route update drains nothing.
	inFlight := slow()
	v1 := strings.Replace(string(v0), `value: "v0"`, `value: "v1"`, 1)
	p.writeBootstrapText(v1)
	code, out := p.reload()
	if err := <-inFlight; err != nil {
		t.Errorf("the 2s request through the changed route: %v; want it answered", err)
	}
	if code != 0 || !strings.Contains(out, "reloaded in place: routes updated ingress/0/0; epoch 0 keeps serving") {
		t.Fatalf("reload of a route change: exit %d: %s", code, out)
	}
	// The listener beside its routes: a hot restart.
	inFlight = slow()
	p.writeBootstrapText(strings.Replace(v1, "stat_prefix: ingress", "stat_prefix: ingress2", 1))
	code, out = p.reload()
	if err := <-inFlight; err != nil {
		t.Errorf("the 2s request through the changed listener: %v; want it answered", err)
	}
	if code != 0 || !strings.Contains(out, "reloaded: epoch 1 is serving") || !strings.Contains(out, "listeners ingress change beside their routes") {
		t.Fatalf("reload of a listener change: exit %d: %s", code, out)
	}
}

// Reloads and stops with requests in flight on an epoch that a hot restart
// replaced, seen by clients that do not retry.

// slowDrain keeps a replaced epoch for long: 10s drain, told to exit at 15s.
var slowDrain = map[string]string{"drain_duration": `"10s"`, "parent_shutdown_duration": `"15s"`}

type slowResult struct {
	code int
	body string
	err  error
	took time.Duration
}

// slowRequest starts a GET /slow?d=… on a connection of its own, over
// HTTP/1.1 or HTTP/2 (h2c), and waits until the upstream holds it.
func (p *agentProc) slowRequest(h2 bool, d time.Duration) <-chan slowResult {
	p.t.Helper()
	before := p.upstream.SlowInFlight()
	out := make(chan slowResult, 1)
	url := envoykit.URL(p.ports.Listener, "/slow?d="+d.String())
	go func() {
		start := time.Now()
		client := &http.Client{Timeout: 40 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		if h2 {
			client = envoykit.NewH2CClient(40 * time.Second)
		}
		resp, err := client.Get(url)
		if err != nil {
			out <- slowResult{err: err, took: time.Since(start)}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && h2 && resp.ProtoMajor != 2 {
			err = fmt.Errorf("answered over %s", resp.Proto)
		}
		out <- slowResult{code: resp.StatusCode, body: string(b), err: err, took: time.Since(start)}
	}()
	if !envoykit.Eventually(10*time.Second, func() bool { return p.upstream.SlowInFlight() > before }) {
		p.t.Fatalf("the slow request never reached the upstream")
	}
	return out
}

func (r slowResult) check(t *testing.T, what string) {
	t.Helper()
	if r.err != nil || r.code != 200 || r.body != "slow ok\n" {
		t.Errorf("%s: %d %q %v after %s; want 200 slow ok", what, r.code, r.body, r.err, r.took.Round(time.Millisecond))
	}
}

// Issue 14, item 3: with exit_on_zero_active_connections, a stop right
// after a reload counted only the new epoch's connections and cut the
// request the old epoch was still serving.
func TestStopRightAfterReloadWaitsForTheOldEpochsRequest(t *testing.T) {
	t.Parallel()
	p := startAgent(t, procOptions{envoy: slowDrain, bootstrap: envoykit.BootstrapOptions{ResponseHeader: "v0"},
		agent: map[string]string{"exit_on_zero_active_connections": "true", "min_drain_duration": `"1s"`, "termination_drain_duration": `"20s"`}})
	req := p.slowRequest(false, 5*time.Second)
	p.rewriteBootstrap(envoykit.BootstrapOptions{ResponseHeader: "v1"})
	if code, out := p.reload(); code != 0 {
		t.Fatalf("reload: exit %d: %s", code, out)
	}
	sent := p.signal(syscall.SIGTERM)
	if !envoykit.Eventually(5*time.Second, func() bool { return p.ns.Count("STATUS=draining: 1 active connections", sent, time.Now()) > 0 }) {
		t.Errorf("the drain never counted the old epoch's connection: %v", p.ns.Messages())
	}
	r := <-req
	r.check(t, "the request on the old epoch")
	code, _ := p.wait(sent, 30*time.Second)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	if !p.logged("no active connections left") {
		t.Errorf("the drain did not end at zero connections")
	}
}

// Issue 14, item 4: a second reload 2s after the first ended the first
// reload's draining epoch at once (Envoy keeps two generations), cutting
// its 8s request. Now the second reload waits for it, and says so.
func TestBackToBackReloadsKeepTheDrainingEpochsRequest(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		name := map[bool]string{false: "HTTP/1.1", true: "HTTP/2"}[h2]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := startAgent(t, procOptions{envoy: slowDrain, bootstrap: envoykit.BootstrapOptions{ResponseHeader: "v0"}})
			req := p.slowRequest(h2, 8*time.Second)
			p.rewriteBootstrap(envoykit.BootstrapOptions{ResponseHeader: "v1"})
			if code, out := p.reload(); code != 0 {
				t.Fatalf("first reload: exit %d: %s", code, out)
			}
			// The scenario: the second reload comes 2s after the first.
			time.Sleep(2 * time.Second)
			p.rewriteBootstrap(envoykit.BootstrapOptions{ResponseHeader: "v2"})
			second := time.Now()
			code, out := p.reload()
			if code != 0 || !strings.Contains(out, "reloaded: epoch 2 is serving") || !strings.Contains(out, "for epoch 0 (pid") {
				t.Errorf("second reload: exit %d: %s; want epoch 2, having waited for epoch 0", code, out)
			}
			r := <-req
			r.check(t, "the 8s request on epoch 0")
			if time.Since(second) < 2*time.Second {
				t.Errorf("the second reload returned %s after it was asked; it cannot have waited for the request", time.Since(second))
			}
			if p.ns.Count("STATUS=live: Envoy pid", second, time.Now()) == 0 || !statusSaid(p, "reload waiting for epoch 0") {
				t.Errorf("STATUS= never said the reload was waiting: %v", p.ns.Messages())
			}
			if rr, err := envoykit.Get(envoykit.URL(p.ports.Listener, "/"), 5*time.Second); err != nil || rr.Header.Get("x-config-version") != "v2" {
				t.Errorf("after the second reload: %+v %v; want v2", rr, err)
			}
		})
	}
}

func statusSaid(p *agentProc, s string) bool {
	for _, m := range p.ns.Messages() {
		if strings.Contains(m.Text, s) {
			return true
		}
	}
	return false
}

// Issue 14, item 7: what clients that do not retry see across reloads:
// busy keep-alive connections, idle keep-alive connections, long
// requests, over HTTP/1.1 (raw, like Python's http.client) and HTTP/2.
func TestReloadsSeenByClientsThatDoNotRetry(t *testing.T) {
	t.Parallel()
	p := startAgent(t, procOptions{envoy: quickDrain, bootstrap: envoykit.BootstrapOptions{ResponseHeader: "v0"}})
	url := envoykit.URL(p.ports.Listener, "/")
	busy := envoykit.Workers{N: 2, Path: "/"}
	long := envoykit.Workers{N: 2, Path: "/slow?d=1500ms"}
	// Idle for less than parent_shutdown_duration (2s): the next request
	// reaches the replaced epoch, which answers it with Connection: close.
	shortIdle := envoykit.Workers{N: 4, Path: "/", Idle: 700 * time.Millisecond}
	// Idle for longer: the replaced epoch may exit (closing the connection)
	// before the next request, which then fails.
	longIdle := envoykit.Workers{N: 6, Path: "/", Idle: 2500 * time.Millisecond}
	load := func(c envoykit.ClientKind, w ...envoykit.Workers) *envoykit.Load {
		return envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: url, Client: c, Workers: w})
	}
	h1, h1idle := load(envoykit.RawHTTP1, busy, long, shortIdle), load(envoykit.RawHTTP1, longIdle)
	h2, h2idle := load(envoykit.H2C, busy, long), load(envoykit.H2C, longIdle)
	const reloads = 5
	for i := 1; i <= reloads; i++ {
		p.rewriteBootstrap(envoykit.BootstrapOptions{ResponseHeader: fmt.Sprintf("v%d", i)})
		if code, out := p.reload(); code != 0 {
			t.Fatalf("reload %d: exit %d: %s", i, code, out)
		}
	}
	// Let the last replaced epoch exit (parent_shutdown_duration 2s) while
	// the load runs: that is when idle connections are closed.
	if !envoykit.Eventually(20*time.Second, func() bool { return len(processesMentioning(p.dir+"/run/epoch-")) == 1 }) {
		t.Errorf("replaced epochs still running: %v", processesMentioning(p.dir))
	}
	for _, l := range []*envoykit.Load{h1, h1idle, h2, h2idle} {
		l.Stop()
	}
	t.Logf("%d reloads; HTTP/1.1 busy, long, and idle 0.7s: %s", reloads, h1)
	t.Logf("HTTP/1.1 idle 2.5s (parent_shutdown_duration 2s): %s; errors %q", h1idle, h1idle.Errors())
	t.Logf("HTTP/2 busy and long: %s; idle 2.5s: %s; errors %q %q", h2, h2idle, h2.Errors(), h2idle.Errors())
	if h1.OK() == 0 || h1idle.OK() == 0 || h2.OK() == 0 || h2idle.OK() == 0 {
		t.Fatalf("a load made no request: %s / %s / %s / %s", h1, h1idle, h2, h2idle)
	}
	if h1.Failed() != 0 {
		t.Errorf("busy, long or briefly idle HTTP/1.1 requests failed: %s %q", h1, h1.Errors())
	}
	if h2.Failed() != 0 {
		t.Errorf("busy or long HTTP/2 requests failed: %s %q", h2, h2.Errors())
	}
	// HTTP/2 connections idle across the replaced epoch's exit: Go's client
	// notices the close before reusing one, but on a busy machine a request
	// can race the GOAWAY and the close (seen in CI under stress-ng: 2 of 36,
	// "server sent GOAWAY and closed the connection"; and, with several idle
	// workers waking together on the shared connection, all of them: "force
	// closed via ClientConn.Close", 5 of 30 in a fresh-clone make test).
	// Allowed, on idle connections only (README, Reload).
	if h2idle.FailedInFlight() != 0 {
		t.Errorf("HTTP/2 idle-connection workers failed on fresh or busy connections: %s %q", h2idle, h2idle.Errors())
	}
	// HTTP/1.1 connections idle across the replaced epoch's exit: Envoy
	// closes them then, and a client that writes on one without checking
	// fails once (README, Reload). Such failures are allowed, only those.
	if h1idle.FailedInFlight() != 0 {
		t.Errorf("HTTP/1.1 idle-connection workers failed on fresh or busy connections: %s %q", h1idle, h1idle.Errors())
	}
}

// The core of the test above, without the connections left idle across
// a replaced epoch's exit (whose failures README allows and whose timing a
// slow machine, or make test-arm64's emulation, shifts): busy and long
// requests over HTTP/1.1 and HTTP/2 see no failure across hot-restart
// reloads, the new configuration answers, and the stop drains.
func TestReloadsUnderBusyLoadFailNothing(t *testing.T) {
	t.Parallel()
	p := startAgent(t, procOptions{envoy: quickDrain, bootstrap: envoykit.BootstrapOptions{ResponseHeader: "v0"}})
	workers := []envoykit.Workers{{N: 2, Path: "/"}, {N: 1, Path: "/slow?d=1500ms"}}
	url := envoykit.URL(p.ports.Listener, "/")
	h1 := envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: url, Client: envoykit.RawHTTP1, Workers: workers})
	h2 := envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: url, Client: envoykit.H2C, Workers: workers})
	const reloads = 3
	for i := 1; i <= reloads; i++ {
		p.rewriteBootstrap(envoykit.BootstrapOptions{ResponseHeader: fmt.Sprintf("v%d", i)})
		if code, out := p.reload(); code != 0 || !strings.Contains(out, fmt.Sprintf("reloaded: epoch %d is serving", i)) {
			t.Fatalf("reload %d: exit %d: %s", i, code, out)
		}
	}
	if !envoykit.Eventually(20*time.Second, func() bool { return len(processesMentioning(p.dir+"/run/epoch-")) == 1 }) {
		t.Errorf("replaced epochs still running: %v", processesMentioning(p.dir))
	}
	h1.Stop()
	h2.Stop()
	t.Logf("%d hot-restart reloads; HTTP/1.1 busy and long: %s; HTTP/2 busy and long: %s", reloads, h1, h2)
	if h1.OK() == 0 || h2.OK() == 0 {
		t.Fatalf("a load made no request: %s / %s", h1, h2)
	}
	if h1.Failed() != 0 {
		t.Errorf("HTTP/1.1 requests failed: %s %q", h1, h1.Errors())
	}
	if h2.Failed() != 0 {
		t.Errorf("HTTP/2 requests failed: %s %q", h2, h2.Errors())
	}
	r, err := envoykit.Get(envoykit.URL(p.ports.Listener, "/"), 10*time.Second)
	if want := fmt.Sprintf("v%d", reloads); err != nil || r.Header.Get("x-config-version") != want {
		t.Errorf("after the reloads Envoy answered %+v, %v; want x-config-version %s", r, err, want)
	}
	sent := p.signal(syscall.SIGTERM)
	if code, _ := p.wait(sent, 30*time.Second); code != 0 {
		t.Fatalf("stop after the reloads exited %d", code)
	}
	for _, want := range []string{"draining envoy", "drain ended"} {
		if !p.logged(want) {
			t.Errorf("the stop's log lacks %q", want)
		}
	}
}

// What an idle kept-alive connection gets during a stop's drain, with
// Envoy 1.40: with the HTTP connection manager's defaults, nothing until
// Envoy exits at the drain's end (no GOAWAY for HTTP/2: README, Stop, said
// otherwise); with its idle_timeout, a GOAWAY (HTTP/2) or a close
// (HTTP/1.1) once the connection has been idle that long.
func TestStopDrainAndIdleConnections(t *testing.T) {
	tests := []struct {
		name        string
		idleTimeout string // the HCM's common_http_protocol_options.idle_timeout, "" for Envoy's default (1h)
		goaway      bool   // the idle HTTP/2 connection gets a GOAWAY before Envoy exits
	}{
		{"defaults", "", false},
		{"idle_timeout 1s, drain_timeout 0.5s", "1s", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			bootstrap := filepath.Join(t.TempDir(), "envoy.yaml")
			p := startAgentWith(t, procOptions{envoy: slowDrain, bootstrapFile: bootstrap,
				agent: map[string]string{"min_drain_duration": `"4s"`, "termination_drain_duration": `"4s"`}},
				func(ports envoykit.Ports) {
					y, err := envoykit.RenderBootstrap(envoykit.BootstrapOptions{Ports: ports})
					if err != nil {
						t.Fatal(err)
					}
					text := string(y)
					if tt.idleTimeout != "" {
						text = strings.Replace(text, "stat_prefix: ingress\n", "stat_prefix: ingress\n          common_http_protocol_options: { idle_timeout: "+tt.idleTimeout+" }\n          drain_timeout: 0.5s\n", 1)
					}
					writeFile(t, bootstrap, text)
				})
			addr := "127.0.0.1:" + strconv.Itoa(p.ports.Listener)
			h2, err := envoykit.DialIdleH2(addr, "/")
			if err != nil {
				t.Fatal(err)
			}
			defer h2.Close()
			if !envoykit.Eventually(5*time.Second, h2.Answered) {
				t.Fatalf("the HTTP/2 request got no answer")
			}
			h1, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer h1.Close()
			br := bufio.NewReader(h1)
			if _, err := io.WriteString(h1, "GET / HTTP/1.1\r\nHost: test\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("HTTP/1.1 request: %v %v", resp, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			h1closed := make(chan time.Time, 1)
			go func() { _, _ = br.ReadByte(); h1closed <- time.Now() }()

			sent := p.signal(syscall.SIGTERM)
			var h1at time.Time
			select {
			case h1at = <-h1closed:
			case <-time.After(20 * time.Second):
				t.Fatalf("the idle HTTP/1.1 connection was still open 20s after SIGTERM")
			}
			<-h2.Done()
			code, took := p.wait(sent, 20*time.Second)
			if code != 0 {
				t.Fatalf("exit %d", code)
			}
			exited := sent.Add(took)
			gaway := "none"
			if !h2.GoAway().IsZero() {
				gaway = h2.GoAway().Sub(sent).Round(time.Millisecond).String()
			}
			t.Logf("stop took %s; idle HTTP/2: GOAWAY %s, closed %s after SIGTERM; idle HTTP/1.1 closed %s after SIGTERM",
				took.Round(time.Millisecond), gaway, h2.Closed().Sub(sent).Round(time.Millisecond), h1at.Sub(sent).Round(time.Millisecond))
			// "Before the drain's end": more than a second before the agent exited.
			early := func(at time.Time) bool { return !at.IsZero() && at.Before(exited.Add(-time.Second)) }
			if got := early(h2.GoAway()); got != tt.goaway {
				t.Errorf("idle HTTP/2 got a GOAWAY before the drain's end: %v, want %v", got, tt.goaway)
			}
			if got := early(h1at); got != tt.goaway {
				t.Errorf("idle HTTP/1.1 closed before the drain's end: %v, want %v", got, tt.goaway)
			}
		})
	}
}

// TestBadReloadDuringADrainFailsAtOnce: a reload that has to wait for a
// draining epoch checks its files first: a bad configuration is refused at
// once, never after the drain.
//
// Issue 20, item 4: a bad bootstrap reloaded right after a good reload,
// while a client still holds a request on the replaced epoch, was refused
// only once that epoch had drained (33-40 s on Debian). It is refused while
// the request is still in flight, and so is a bad one that arrives while a
// good reload waits; the good reload then runs the files it validated.
func TestBadReloadDuringADrainFailsAtOnce(t *testing.T) {
	t.Parallel()
	p := startAgent(t, procOptions{envoy: slowDrain, bootstrap: envoykit.BootstrapOptions{ResponseHeader: "v0"}})
	bootstrap := filepath.Join(p.dir, "envoy.yaml")
	breakBootstrap := func() {
		good, err := os.ReadFile(bootstrap)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, bootstrap, strings.Replace(string(good), "type: STATIC", "type: NOT_A_TYPE", 1))
	}
	// The drain bound: epoch 0 holds this request for 12 s, longer than
	// every step below takes even on a loaded machine.
	req := p.slowRequest(false, 12*time.Second)
	inFlight := func() bool { return p.upstream.SlowInFlight() > 0 }

	p.rewriteBootstrap(envoykit.BootstrapOptions{ResponseHeader: "v1"})
	if code, out := p.reload(); code != 0 {
		t.Fatalf("good reload: exit %d: %s", code, out)
	}
	breakBootstrap()
	asked := time.Now()
	code, out := p.reload()
	took := time.Since(asked)
	if code != 3 || !strings.Contains(out, "Envoy rejects this bootstrap") || strings.Contains(out, "waiting for epoch") {
		t.Errorf("bad reload after a good one: exit %d: %s; want exit 3, Envoy's complaint, no wait", code, out)
	}
	if !inFlight() {
		t.Errorf("the bad reload answered after %s, once epoch 0's request had ended: it waited for the drain", took)
	}
	t.Logf("bad reload after a good one refused in %s, epoch 0's request still in flight", took.Round(time.Millisecond))

	// A good reload now has to wait for epoch 0, and says so at once.
	p.rewriteBootstrap(envoykit.BootstrapOptions{ResponseHeader: "v2"})
	type result struct {
		code int
		out  string
	}
	waiting := make(chan result, 1)
	go func() {
		code, out := p.reload()
		waiting <- result{code, out}
	}()
	if !envoykit.Eventually(10*time.Second, func() bool { return statusSaid(p, "reload waiting for epoch 0") }) {
		t.Fatalf("STATUS= never said the reload waits for epoch 0: %v", p.ns.Messages())
	}
	breakBootstrap()
	asked = time.Now()
	code, out = p.reload()
	took = time.Since(asked)
	if code != 3 || !strings.Contains(out, "Envoy rejects this bootstrap") {
		t.Errorf("bad reload while a good one waits: exit %d: %s; want exit 3", code, out)
	}
	select {
	case r := <-waiting:
		t.Fatalf("the waiting reload ended (exit %d: %s) before epoch 0's request did", r.code, r.out)
	default:
	}
	if !inFlight() {
		t.Errorf("the bad reload answered after %s, once epoch 0's request had ended", took)
	}
	t.Logf("bad reload while a good one waits refused in %s", took.Round(time.Millisecond))

	r := <-req
	r.check(t, "the 12s request on epoch 0")
	w := <-waiting
	if w.code != 0 || !strings.Contains(w.out, "reload: the configuration is valid; waiting for epoch 0 (pid") ||
		!strings.Contains(w.out, "reloaded: epoch 2 is serving") {
		t.Errorf("the waiting reload: exit %d: %s; want it to say at once that it waits, then epoch 2", w.code, w.out)
	}
	// It ran the files it validated (v2), not the broken file on disk.
	if rr, err := envoykit.Get(envoykit.URL(p.ports.Listener, "/"), 5*time.Second); err != nil || rr.Header.Get("x-config-version") != "v2" {
		t.Errorf("after the waiting reload: %+v %v; want v2", rr, err)
	}
}

// TestRefusedReloadServesNothingNew: a rollout adds a listener whose port
// is taken on this host, beside a route change, while clients that do not
// retry keep asking the existing listener. Each such reload is refused and
// put back, and not one answer comes from the new route: the listener is
// added (and refused) before the route changes. (With the routes changed
// first, 8 of 9 such reloads served a request or more from the new route
// before the put-back.)
func TestRefusedReloadServesNothingNew(t *testing.T) {
	t.Parallel()
	p := inPlaceAgent(t, envoykit.BootstrapOptions{ResponseHeader: "v0"})
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	v0, err := envoykit.RenderBootstrap(envoykit.BootstrapOptions{Ports: p.ports, ResponseHeader: "v0"})
	if err != nil {
		t.Fatal(err)
	}
	l := envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: envoykit.URL(p.ports.Listener, "/"), Client: envoykit.RawHTTP1,
		Workers: []envoykit.Workers{{N: 4, Path: "/"}}})
	defer l.Stop()
	envoykit.WaitAnswers(t, l, 20)
	const rollouts = 6
	for i := 1; i <= rollouts; i++ {
		text := strings.Replace(string(v0), `value: "v0"`, fmt.Sprintf(`value: "v%d"`, i), 1)
		text = strings.Replace(text, "  clusters:\n", fmt.Sprintf(`  - name: taken
    address: { socket_address: { address: 127.0.0.1, port_value: %d } }
    filter_chains: [{ filters: [{ name: envoy.filters.network.tcp_proxy, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: t, cluster: upstream } }] }]
  clusters:
`, held.Addr().(*net.TCPAddr).Port), 1)
		p.writeBootstrapText(text)
		if code, out := p.reload(); code == 0 || !strings.Contains(out, "listener taken: cannot bind") || !strings.Contains(out, "put back") {
			t.Fatalf("rollout %d: exit %d: %s", i, code, out)
		}
		envoykit.WaitAnswers(t, l, 20)
	}
	l.Stop()
	versions := l.Versions()
	t.Logf("%d refused rollouts under load: %s; answers by version %v", rollouts, l, versions)
	if len(versions) != 1 || versions["v0"] == 0 || l.Failed() != 0 {
		t.Errorf("answers by version %v, %d failed (last: %s); want every answer from v0, the configuration in force", versions, l.Failed(), l.LastErr())
	}
}

// exampleAgent runs the agent on a bootstrap written the way Envoy's own
// examples are (envoykit.ExampleBootstrap: no node, listeners without
// names, the admin as o says), its listener on the agent's listener port,
// with a file that sets no admin key and leaves reload_method to its
// default, plus envoyKeys. It returns the agent, the bootstrap's path and
// o as written.
func exampleAgent(t *testing.T, o envoykit.ExampleOptions, envoyKeys map[string]string) (*agentProc, string, envoykit.ExampleOptions) {
	t.Helper()
	keys := map[string]string{"admin_port": ""}
	maps.Copy(keys, envoyKeys)
	path := filepath.Join(shortTempDir(t), "envoy.yaml")
	p := startAgentWith(t, procOptions{envoy: keys, agent: map[string]string{"reload_method": ""}, bootstrapFile: path}, func(ports envoykit.Ports) {
		o.Listener, o.Upstream = ports.Listener, ports.Upstream
		writeExample(t, path, o)
	})
	return p, path, o
}

// writeExample writes the example bootstrap for o to path, atomically.
func writeExample(t *testing.T, path string, o envoykit.ExampleOptions) {
	t.Helper()
	text, err := envoykit.ExampleBootstrap(o)
	if err == nil {
		err = envoykit.WriteFileAtomic(path, text)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// startBare starts a bare Envoy on the example bootstrap for o, whose
// admin must be on TCP, until it is LIVE.
func startBare(t *testing.T, o envoykit.ExampleOptions) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bare.yaml")
	writeExample(t, path, o)
	out := &envoykit.SyncBuffer{}
	bare, err := envoykit.Start(envoykit.Binary(t), append(envoykit.BareArgs(path, envoykit.BaseID()), "--disable-hot-restart"), out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bare.Kill)
	_, port, _ := net.SplitHostPort(o.Admin)
	admin, _ := strconv.Atoi(port)
	if err := bare.WaitReady(admin, 20*time.Second); err != nil {
		t.Fatalf("the bare Envoy: %v\n%s", err, out)
	}
}

// listenerStats are the names of Envoy's per-listener statistics
// (listener.<address>.*), with each port in ports written as PORT.
func listenerStats(t *testing.T, body string, ports ...int) []string {
	t.Helper()
	var out []string
	for line := range strings.Lines(body) {
		name, _, ok := strings.Cut(strings.TrimSpace(line), ": ")
		if !ok || !strings.HasPrefix(name, "listener.") {
			continue
		}
		for _, p := range ports {
			name = strings.ReplaceAll(name, "_"+strconv.Itoa(p)+".", "_PORT.")
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// TestExampleBootstrapReloadsInPlace: a bootstrap written as Envoy's
// examples are (no admin, no node, a listener without a name) runs with no
// edit: the agent's copy gets its private admin socket and a node, said
// once each, and `validate` prints the same before a start. The listener
// runs under a name made of its address, said once and shown by `status`;
// a route edit is served in place by the same Envoy; Envoy's statistics of
// the listener are a bare Envoy's.
func TestExampleBootstrapReloadsInPlace(t *testing.T) {
	t.Parallel()
	p, path, o := exampleAgent(t, envoykit.ExampleOptions{ResponseHeader: "v0"}, nil)
	sock := filepath.Join(p.dir, "run", "admin.sock")
	if fi, err := os.Stat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin socket %s: %v %v; want a socket, mode 0600", sock, fi, err)
	}
	name := fmt.Sprintf("0.0.0.0_%d", o.Listener)
	said := []string{"the bootstrap has no admin address; Envoy runs with its admin API on unix:" + sock,
		"the bootstrap sets no node.id and node.cluster; Envoy runs with", // then "envoy-agent", quoted
		fmt.Sprintf("listeners without a name run under these names in the files the agent writes for Envoy (Envoy's statistics name a listener by its address, and keep theirs): %s (static_resources.listeners[0], 0.0.0.0:%d)", name, o.Listener)}
	for _, s := range said {
		if !p.logged(s) || strings.Count(p.stderr.String(), s) != 1 {
			t.Errorf("run said %q %d times, want once:\n%s", s, strings.Count(p.stderr.String(), s), p.stderr)
		}
	}
	code, stdout, stderr := runAgent(t, "validate", "--config", p.config)
	if code != 0 || !strings.Contains(stdout, "OK:") {
		t.Fatalf("validate: exit %d: %s%s", code, stdout, stderr)
	}
	for _, s := range []string{said[0], said[1], fmt.Sprintf("listeners without a name run under these names in the agent's resource files (Envoy's statistics name a listener by its address, so they keep theirs): %s (static_resources.listeners[0], 0.0.0.0:%d)", name, o.Listener)} {
		if n := strings.Count(stdout, "note: "+path+": "+s); n != 1 {
			t.Errorf("validate printed %q %d times, want once:\n%s", s, n, stdout)
		}
	}
	if code, stdout, stderr := runAgent(t, "status", "--config", p.config); code != 0 || !strings.Contains(stdout, fmt.Sprintf("%s 0.0.0.0:%d (named by the agent)", name, o.Listener)) {
		t.Errorf("envoy-agent status: exit %d: %s%s", code, stdout, stderr)
	}
	if v := p.answer(); v != "v0" {
		t.Fatalf("answer %q, want v0", v)
	}
	pid := p.servingPid()
	o.ResponseHeader = "v1"
	writeExample(t, path, o)
	if code, out := p.reload(); code != 0 || !strings.Contains(out, "reloaded in place: routes updated "+name+"/0/0; epoch 0 keeps serving") {
		t.Fatalf("reload of a route edit: exit %d: %s", code, out)
	}
	if v := p.answer(); v != "v1" {
		t.Errorf("after the reload the listener answers %q, want v1", v)
	}
	if now := p.servingPid(); now != pid {
		t.Errorf("Envoy pid %d serves after the reload, want %d", now, pid)
	}
	if n := strings.Count(p.stderr.String(), said[2]); n != 1 {
		t.Errorf("the names were said %d times after the reload, want once", n)
	}

	// A bare Envoy of the same bootstrap (with an admin to read its
	// statistics from) has the same statistics of its listener.
	bare := envoykit.ExampleOptions{Listener: envoykit.FreePort(t), Upstream: o.Upstream, Admin: fmt.Sprintf("127.0.0.1:%d", envoykit.FreePort(t)), ResponseHeader: "v1"}
	startBare(t, bare)
	for _, port := range []int{o.Listener, bare.Listener} {
		if r, err := envoykit.Get(envoykit.URL(port, "/"), 5*time.Second); err != nil || r.Code != 200 {
			t.Fatalf("GET / on port %d: %+v %v", port, r, err)
		}
	}
	r, err := envoykit.Get("http://"+bare.Admin+"/stats?filter=%5Elistener%5C.", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := listenerStats(t, r.Body, bare.Listener)
	resp, err := adminapi.NewUnix(sock).Get(context.Background(), "/stats?filter=%5Elistener%5C.")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	got := listenerStats(t, string(body), o.Listener)
	if len(want) == 0 || !slices.Equal(got, want) {
		t.Errorf("the agent's Envoy's listener statistics:\n%s\nthe bare Envoy's:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	t.Logf("%d statistics of the listener, the same names as a bare Envoy's", len(got))
}
