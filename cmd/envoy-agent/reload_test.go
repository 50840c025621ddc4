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

	"github.com/envoy-agent/envoy-agent/envoy"
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
	if code != 1 || !strings.Contains(p.stderr.String(), "without all of its listeners and clusters") || !strings.Contains(p.stderr.String(), "cannot bind") {
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
	resp, err := envoy.NewAdminClientUnix(sock).Get(context.Background(), "/stats?filter=%5Elistener%5C.")
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
