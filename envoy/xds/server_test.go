package xds

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// oneListener is a bootstrap of one HTTP listener on port whose routes,
// r0, come over ADS from s for the epoch (initial_fetch_timeout, when set,
// bounds Envoy's wait for them), with a static cluster c1.
func oneListener(t testing.TB, s *Server, epoch string, port int, fetchTimeout string) string {
	source := "{ads: {}, resource_api_version: V3}"
	if fetchTimeout != "" {
		source = "{ads: {}, resource_api_version: V3, initial_fetch_timeout: " + fetchTimeout + "}"
	}
	cluster := "  - {name: c1, type: STATIC, load_assignment: {cluster_name: c1, endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 9}}}}]}]}}\n"
	l := fmt.Sprintf("  - {name: l0, address: {socket_address: {address: 127.0.0.1, port_value: %d}}, filter_chains: [{filters: [{name: hcm, typed_config: {\"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager, stat_prefix: l0, %s, rds: {route_config_name: r0, config_source: %s}}}]}]}\n", port, router, source)
	return adsBootstrap(t, s, epoch, cluster, l)
}

func route(t testing.TB, y string) Resource {
	t.Helper()
	r, err := ConvertYAML(RouteType, []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func body(t testing.TB, port int) string {
	r, err := envoykit.Get(envoykit.URL(port, "/"), 2*time.Second)
	if err != nil {
		return "error: " + err.Error()
	}
	return r.Body
}

// TestRejected: a route configuration Envoy refuses is NACKed with
// Envoy's reason, and the previous one goes on serving.
func TestRejected(t *testing.T) {
	if envoykit.UnitTier() {
		t.Skip("runs Envoy")
	}
	s := listen(t, testLog{t})
	port := envoykit.FreePort(t)
	if err := s.Set("e0", RouteType, []Resource{route(t, routeYAML(0, "v1"))}); err != nil {
		t.Fatal(err)
	}
	startEnvoy(t, oneListener(t, s, "e0", port, ""), envoykit.BaseID())
	if got := body(t, port); got != "v1" {
		t.Fatalf("got %q", got)
	}
	bad := route(t, `{name: r0, virtual_hosts: [{name: v, domains: ["*"], routes: [{match: {safe_regex: {regex: "("}}, direct_response: {status: 200}}]}]}`)
	_, err := s.Update(withTimeout(t, 10*time.Second), "e0", RouteType, []Resource{bad}, nil)
	var rej *RejectedError
	if !errors.As(err, &rej) || !strings.Contains(rej.Detail, "missing )") {
		t.Fatalf("want a rejection naming the regex, got %v", err)
	}
	t.Logf("rejected: %v", err)
	if got := body(t, port); got != "v1" {
		t.Fatalf("after the rejection: %q", got)
	}
	ts := s.Status()["e0"].Streams[0].Types[RouteType]
	if ts.Rejected == "" || ts.Acked == ts.Sent {
		t.Fatalf("status after the rejection: %+v", ts)
	}
	// The next good version is taken.
	if _, err := s.Update(withTimeout(t, 10*time.Second), "e0", RouteType, []Resource{route(t, routeYAML(0, "v2"))}, nil); err != nil {
		t.Fatal(err)
	}
	if !envoykit.Eventually(5*time.Second, func() bool { return body(t, port) == "v2" }) {
		t.Fatalf("v2 not served: %q", body(t, port))
	}
}

// TestUnknownCluster measures what RDS takes that a static bootstrap
// refuses: a route to a cluster that does not exist (validate_clusters is
// false by default for RDS, true for an inline route_config), and that a
// route configuration that sets validate_clusters: true is refused over
// RDS too.
func TestUnknownCluster(t *testing.T) {
	if envoykit.UnitTier() {
		t.Skip("runs Envoy")
	}
	const toNowhere = `{name: r0, %svirtual_hosts: [{name: v, domains: ["*"], routes: [{match: {prefix: "/"}, route: {cluster: nowhere}}]}]}`
	// Static: --mode validate refuses it.
	dir := t.TempDir()
	static := fmt.Sprintf("static_resources:\n  listeners:\n  - {name: l0, address: {socket_address: {address: 127.0.0.1, port_value: 1}}, filter_chains: [{filters: [{name: hcm, typed_config: {\"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager, stat_prefix: l0, %s, route_config: %s}}]}]}\n", router, fmt.Sprintf(toNowhere, ""))
	if err := os.WriteFile(dir+"/static.yaml", []byte(static), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runValidate(t, dir+"/static.yaml")
	if err == nil || !strings.Contains(out, "route: unknown") {
		t.Fatalf("a static bootstrap with a route to an unknown cluster: %v\n%s", err, out)
	}
	s := listen(t, testLog{t})
	port := envoykit.FreePort(t)
	if err := s.Set("e0", RouteType, []Resource{route(t, routeYAML(0, "v1"))}); err != nil {
		t.Fatal(err)
	}
	startEnvoy(t, oneListener(t, s, "e0", port, ""), envoykit.BaseID())
	// Over RDS, Envoy takes it: the route then answers 503.
	if _, err := s.Update(withTimeout(t, 10*time.Second), "e0", RouteType, []Resource{route(t, fmt.Sprintf(toNowhere, ""))}, nil); err != nil {
		t.Fatalf("RDS refused a route to an unknown cluster: %v", err)
	}
	if !envoykit.Eventually(5*time.Second, func() bool {
		r, err := envoykit.Get(envoykit.URL(port, "/"), time.Second)
		return err == nil && r.Code == 503
	}) {
		t.Fatal("the route to an unknown cluster does not answer 503")
	}
	// With validate_clusters: true, RDS refuses it as a static bootstrap does.
	_, err = s.Update(withTimeout(t, 10*time.Second), "e0", RouteType, []Resource{route(t, fmt.Sprintf(toNowhere, "validate_clusters: true, "))}, nil)
	var rej *RejectedError
	if !errors.As(err, &rej) || !strings.Contains(rej.Detail, "route: unknown") {
		t.Fatalf("validate_clusters: true over RDS: %v", err)
	}
	t.Logf("with validate_clusters: %s", rej.Detail)
}

// TestUnknownName: Envoy subscribes to a route configuration the epoch's
// set does not have. The server answers nothing for it (Envoy's listener
// waits, up to its initial_fetch_timeout at a start, then serves without
// routes), and serves it as soon as the set has it.
func TestUnknownName(t *testing.T) {
	if envoykit.UnitTier() {
		t.Skip("runs Envoy")
	}
	s := listen(t, testLog{t})
	port := envoykit.FreePort(t)
	e, live := startEnvoy(t, oneListener(t, s, "e0", port, "1s"), envoykit.BaseID())
	t.Logf("LIVE after %v with initial_fetch_timeout 1s and no route configuration", live.Round(time.Millisecond))
	if live < time.Second {
		t.Fatalf("Envoy was LIVE after %v, before its initial_fetch_timeout", live)
	}
	if r, err := envoykit.Get(envoykit.URL(port, "/"), 2*time.Second); err != nil || r.Code != 404 {
		t.Fatalf("without its routes the listener answered %v %d", err, r.Code)
	}
	ts := s.Status()["e0"].Streams[0].Types[RouteType]
	if len(ts.Unknown) != 1 || ts.Unknown[0] != "r0" {
		t.Fatalf("status: %+v", ts)
	}
	if _, err := s.Update(withTimeout(t, 10*time.Second), "e0", RouteType, []Resource{route(t, routeYAML(0, "v1"))}, nil); err != nil {
		t.Fatal(err)
	}
	if !envoykit.Eventually(5*time.Second, func() bool { return body(t, port) == "v1" }) {
		t.Fatalf("not served once known: %q", body(t, port))
	}
	_ = e
}

// TestHotRestartEpochs runs a real hot restart: epoch 0 and epoch 1 each
// answered from their own set. The draining parent keeps its routes (a
// connection it holds is answered by them) and still acknowledges what it
// is sent; the child serves its own.
func TestHotRestartEpochs(t *testing.T) {
	if envoykit.UnitTier() {
		t.Skip("runs Envoy")
	}
	s := listen(t, testLog{t})
	port := envoykit.FreePort(t)
	base := envoykit.BaseID()
	for i, v := range []string{"parent", "child"} {
		if err := s.Set("e"+strconv.Itoa(i), RouteType, []Resource{route(t, routeYAML(0, v))}); err != nil {
			t.Fatal(err)
		}
	}
	drain := []string{"--drain-time-s", "60", "--parent-shutdown-time-s", "90"}
	parent, _ := startEnvoy(t, oneListener(t, s, "e0", port, ""), base, append([]string{"--restart-epoch", "0"}, drain...)...)
	conn, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	held := dialKeptAlive(t, conn, "x")
	if got, _, err := held.get(); err != nil || got != "parent" {
		t.Fatalf("parent: %q %v", got, err)
	}
	child, _ := startEnvoy(t, oneListener(t, s, "e1", port, ""), base, append([]string{"--restart-epoch", "1"}, drain...)...)
	if !envoykit.Eventually(5*time.Second, func() bool { return body(t, port) == "child" }) {
		t.Fatalf("new connections: %q", body(t, port))
	}
	if got, _, err := held.get(); err != nil || got != "parent" {
		t.Fatalf("the parent's held connection got %q %v", got, err)
	}
	st := s.Status()
	if len(st["e0"].Streams) != 1 || int(st["e0"].Streams[0].Pid) != parent.Pid() || len(st["e1"].Streams) != 1 || int(st["e1"].Streams[0].Pid) != child.Pid() {
		t.Fatalf("status: %+v", st)
	}
	// The draining parent still takes a change of its own set.
	if _, err := s.Update(withTimeout(t, 10*time.Second), "e0", RouteType, []Resource{route(t, routeYAML(0, "parent-2"))}, nil); err != nil {
		t.Fatal(err)
	}
	if got, _, err := held.get(); err != nil || got != "parent-2" {
		t.Fatalf("the parent's held connection after its update: %q %v", got, err)
	}
	if body(t, port) != "child" {
		t.Fatal("the parent's update reached the child")
	}
}

// TestReconnect: the server goes away (the agent re-executing itself) and
// comes back on a new socket at the same path; Envoy serves on meanwhile
// and reconnects with its back-off, and takes the new server's set.
func TestReconnect(t *testing.T) {
	if envoykit.UnitTier() {
		t.Skip("runs Envoy")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := Listen(dir, testLog{t})
	if err != nil {
		t.Fatal(err)
	}
	port := envoykit.FreePort(t)
	if err := s.Set("e0", RouteType, []Resource{route(t, routeYAML(0, "v1"))}); err != nil {
		t.Fatal(err)
	}
	e, _ := startEnvoy(t, oneListener(t, s, "e0", port, ""), envoykit.BaseID())
	load := envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: envoykit.URL(port, "/"), Client: envoykit.RawHTTP1, Workers: []envoykit.Workers{{N: 2, Idle: 5 * time.Millisecond}}})
	envoykit.WaitAnswers(t, load, 20)
	gone := time.Now()
	s.Close()
	envoykit.WaitAnswers(t, load, load.OK()+50) // Envoy serves with no server
	s2, err := Listen(dir, testLog{t})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s2.Close)
	back := time.Now()
	if err := s2.Set("e0", RouteType, []Resource{route(t, routeYAML(0, "v1"))}); err != nil {
		t.Fatal(err)
	}
	if !envoykit.Eventually(10*time.Second, func() bool {
		st := s2.Status()["e0"]
		return len(st.Streams) == 1 && st.Streams[0].Types[RouteType].Acked != ""
	}) {
		t.Fatal("Envoy did not reconnect")
	}
	t.Logf("Envoy reconnected and acknowledged %v after the new socket was there (the server was gone %v)", time.Since(back).Round(time.Millisecond), back.Sub(gone).Round(time.Millisecond))
	if _, err := s2.Update(withTimeout(t, 10*time.Second), "e0", RouteType, []Resource{route(t, routeYAML(0, "v2"))}, nil); err != nil {
		t.Fatal(err)
	}
	if !envoykit.Eventually(5*time.Second, func() bool { return body(t, port) == "v2" }) {
		t.Fatalf("after the reconnection: %q", body(t, port))
	}
	load.Stop()
	if load.Failed() != 0 || !e.Running() {
		t.Fatalf("%d of %d requests failed (%s); Envoy running: %v", load.Failed(), load.OK()+load.Failed(), load.LastErr(), e.Running())
	}
	t.Logf("%d requests, 0 failed", load.OK())
}

// runValidate runs envoy --mode validate on a bootstrap.
func runValidate(t testing.TB, path string) (string, error) {
	out := new(envoykit.SyncBuffer)
	p, err := envoykit.Start(envoykit.Binary(t), []string{"--mode", "validate", "-c", path, "-l", "error"}, out)
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	return out.String(), p.Err()
}
