//go:build linux

package inplace

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy/xds"
	"github.com/envoy-agent/envoy-agent/envoy/xds/ads"
	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// httpAdmin is Admin over Envoy's admin port.
type httpAdmin int

func (a httpAdmin) Get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", int(a), path), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return body, err
}

// compareAndApply applies what Compare finds from old to new, as a reload
// does.
func compareAndApply(ctx context.Context, r Running, old, new *Bootstrap) (Change, error) {
	c, err := Compare(old, new)
	if err != nil {
		return c, err
	}
	return c, Apply(ctx, r, old, new, c)
}

// newServer starts the agent's ADS server in a private folder of the test.
func newServer(t *testing.T) *xds.Server {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := xds.Listen(dir, testLog{t})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// testLog is the server's log into the test's.
type testLog struct{ t *testing.T }

func (l testLog) Infof(f string, a ...any)  { l.t.Logf("info: "+f, a...) }
func (l testLog) Warnf(f string, a ...any)  { l.t.Logf("warn: "+f, a...) }
func (l testLog) Errorf(f string, a ...any) { l.t.Logf("error: "+f, a...) }

// writeAndServe writes b's files into dir for the epoch, wired to the
// server s, and sets its route configurations and secrets there, as the
// agent does before an epoch starts; it returns the bootstrap to run.
func writeAndServe(t *testing.T, dir string, b *Bootstrap, s *xds.Server, epoch string) string {
	t.Helper()
	boot, err := Write(dir, b, Wire{Socket: s.Path(), Epoch: epoch})
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []ads.Type{ads.RouteType, ads.SecretType} {
		if err := s.Set(epoch, typ, b.Served(typ)); err != nil {
			t.Fatal(err)
		}
	}
	return boot
}

// keepAlive is an HTTP/1.1 connection kept open between requests.
type keepAlive struct {
	conn net.Conn
	r    *bufio.Reader
}

func dialKeepAlive(t *testing.T, port int) *keepAlive {
	t.Helper()
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &keepAlive{conn: c, r: bufio.NewReader(c)}
}

// get asks for / and returns the x-config-version header of the answer.
func (k *keepAlive) get() (string, error) {
	v, _, err := k.answer()
	return v, err
}

// answer asks for / and returns the x-config-version header of the answer
// and whether Envoy closes the connection after it (Connection: close, as
// a draining listener answers).
func (k *keepAlive) answer() (string, bool, error) {
	_ = k.conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(k.conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return "", false, err
	}
	resp, err := http.ReadResponse(k.r, nil)
	if err != nil {
		return "", false, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", false, errors.New(resp.Status)
	}
	return resp.Header.Get("x-config-version"), resp.Close, nil
}

// version is what a fresh connection to port is answered with.
func version(port int) string {
	r, err := envoykit.Get(envoykit.URL(port, "/"), 2*time.Second)
	if err != nil || r.Code != http.StatusOK {
		return fmt.Sprintf("error %v (%d)", err, r.Code)
	}
	return r.Header.Get("x-config-version")
}

// TestApplyWithEnvoy changes a real Envoy's listeners and clusters through
// the files: a route change is served by the same process and an idle
// keep-alive connection on the other listener still answers; a change that
// Envoy rejects (a listener whose port another socket holds, with a cluster
// updated in the same change) leaves every file and resource as it was;
// a cluster is added, then removed.
func TestApplyWithEnvoy(t *testing.T) {
	bin := envoykit.Binary(t)
	up := envoykit.NewUpstream(t)
	ports := envoykit.NewPorts(t)
	ports.Upstream = up.Port
	other := envoykit.FreePort(t)
	v1, err := envoykit.RenderBootstrap(envoykit.BootstrapOptions{Ports: ports, ExtraListeners: []int{other}, ResponseHeader: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	old, err := Parse("envoy.yaml", v1, xds.Convert)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "epoch-0-1-envoy.yaml.d")
	srv := newServer(t)
	boot := writeAndServe(t, dir, old, srv, "epoch-0-1")
	out := &envoykit.SyncBuffer{}
	// Immediate drain: a connection of a listener that drains is told to
	// close at its next answer.
	p, err := envoykit.Start(bin, append(envoykit.BareArgs(boot, 0), "--disable-hot-restart", "--drain-strategy", "immediate"), out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	if err := p.WaitReady(ports.Admin, 10*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if v := version(ports.Listener); v != "v1" {
		t.Fatalf("first answer %q, want v1", v)
	}
	idle := dialKeepAlive(t, other)
	if v, err := idle.get(); err != nil || v != "v1" {
		t.Fatalf("idle connection: %q %v", v, err)
	}
	admin := httpAdmin(ports.Admin)
	ctx := context.Background()
	run := Running{Dir: dir, Admin: admin, ADS: srv, Epoch: "epoch-0-1"}
	if err := Accepted(ctx, run); err != nil {
		t.Fatalf("Accepted: %v", err)
	}

	// apply moves the Envoy serving cur to text, which must parse.
	cur := old
	apply := func(text string) (Change, error) {
		t.Helper()
		next, err := Parse("envoy.yaml", []byte(text), xds.Convert)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		c, err := compareAndApply(ctx, run, cur, next)
		t.Logf("apply %s: %v in %s", c, err, time.Since(start).Round(time.Microsecond))
		if err == nil {
			cur = next
		}
		return c, err
	}

	// The first listener's route only (its header is the first "v1"): a
	// route update, which drains nothing. A kept-alive connection on that
	// listener is answered by the new routes and stays open.
	same := dialKeepAlive(t, ports.Listener)
	if v, err := same.get(); err != nil || v != "v1" {
		t.Fatalf("kept-alive connection: %q %v", v, err)
	}
	v2 := strings.Replace(string(v1), `value: "v1"`, `value: "v2"`, 1)
	if c, err := apply(v2); err != nil || c.String() != "routes updated ingress/0/0" {
		t.Fatalf("Apply = %q, %v", c, err)
	}
	if v := version(ports.Listener); v != "v2" {
		t.Errorf("after the change the listener answers %q, want v2", v)
	}
	if v, closing, err := same.answer(); err != nil || v != "v2" || closing {
		t.Errorf("the kept-alive connection on the changed listener: %q, closing %v, %v; want v2 and kept open", v, closing, err)
	}
	if v, err := idle.get(); err != nil || v != "v1" {
		t.Errorf("the idle connection on the unchanged listener: %q %v, want v1", v, err)
	}
	// A change of the listener itself (its connection manager's stat
	// prefix) is a listener update: that connection drains.
	v2l := strings.Replace(v2, "stat_prefix: ingress", "stat_prefix: ingress2", 1)
	if c, err := apply(v2l); err != nil || c.String() != "listeners updated ingress" {
		t.Fatalf("Apply = %q, %v", c, err)
	}
	if _, closing, err := same.answer(); err != nil || !closing {
		t.Errorf("the kept-alive connection after a listener update: closing %v, %v; want Connection: close (it drains)", closing, err)
	}
	if c, err := apply(v2); err != nil || c.String() != "listeners updated ingress" {
		t.Fatalf("Apply back = %q, %v", c, err)
	}
	if !p.Running() {
		t.Fatal("Envoy exited")
	}

	// A listener on a taken port, and the upstream cluster changed.
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	heldPort := held.Addr().(*net.TCPAddr).Port
	ldsBefore, _ := os.ReadFile(filepath.Join(dir, ldsFile))
	cdsBefore, _ := os.ReadFile(filepath.Join(dir, cdsFile))
	bad := strings.Replace(v2, "connect_timeout: 1s", "connect_timeout: 2s", 1)
	bad = strings.Replace(bad, "  clusters:\n", fmt.Sprintf(`  - name: taken
    address: { socket_address: { address: 127.0.0.1, port_value: %d } }
    filter_chains: [{ filters: [{ name: envoy.filters.network.tcp_proxy, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: t, cluster: upstream } }] }]
  clusters:
`, heldPort), 1)
	c, err := apply(bad)
	var rej *RejectedError
	if !errors.As(err, &rej) || !rej.Restored || !strings.Contains(rej.Reason, "listener taken: cannot bind") {
		t.Fatalf("Apply of a listener on a taken port = %q, %v; want a RejectedError naming the bind", c, err)
	}
	if c.String() != "listeners added taken; clusters updated upstream" {
		t.Errorf("change %q", c)
	}
	ldsAfter, _ := os.ReadFile(filepath.Join(dir, ldsFile))
	cdsAfter, _ := os.ReadFile(filepath.Join(dir, cdsFile))
	if string(ldsAfter) != string(ldsBefore) || string(cdsAfter) != string(cdsBefore) {
		t.Error("the files were not put back")
	}
	body, err := admin.Get(ctx, "/config_dump?resource=dynamic_active_clusters")
	if err != nil || !strings.Contains(string(body), `"connect_timeout": "1s"`) || strings.Contains(string(body), `"connect_timeout": "2s"`) {
		t.Errorf("the upstream cluster is not back at 1s: %v\n%s", err, body)
	}
	if v := version(ports.Listener); v != "v2" {
		t.Errorf("after the rejection the listener answers %q, want v2", v)
	}

	// An HTTP listener added, with its routes, then removed with them.
	third := envoykit.FreePort(t)
	v3, err := envoykit.RenderBootstrap(envoykit.BootstrapOptions{Ports: ports, ExtraListeners: []int{other, third}, ResponseHeader: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	v3s := strings.Replace(string(v3), `value: "v1"`, `value: "v2"`, 1)
	if c, err := apply(v3s); err != nil || c.String() != "listeners added ingress_2; routes added ingress_2/0/0" {
		t.Fatalf("Apply = %q, %v", c, err)
	}
	if v := version(third); v != "v1" {
		t.Errorf("the added listener answers %q, want v1", v)
	}
	if c, err := apply(v2); err != nil || c.String() != "listeners removed ingress_2; routes removed ingress_2/0/0" {
		t.Fatalf("Apply = %q, %v", c, err)
	}
	if n := srv.Status()["epoch-0-1"].Resources[ads.RouteType]; n != 2 {
		t.Errorf("the server holds %d route configurations of the epoch, want 2 (the removed one gone)", n)
	}

	// A listener added whose route goes to a cluster that does not exist:
	// Envoy's RDS takes such a route unless validate_clusters, which the
	// agent sets, so Envoy refuses it as the static bootstrap would, with
	// its own reason, and at once (not when the listener's warming ends).
	// (A listener of its own: ingress_2 drains, and its routes with it.)
	v4, err := envoykit.RenderBootstrap(envoykit.BootstrapOptions{Ports: ports, ExtraListeners: []int{other, third, envoykit.FreePort(t)}, ResponseHeader: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	v4s := strings.Replace(string(v4), `value: "v1"`, `value: "v2"`, 1)
	last := strings.LastIndex(v4s, "cluster: upstream,") // ingress_3's route
	toNowhere := v4s[:last] + "cluster: nowhere," + v4s[last+len("cluster: upstream,"):]
	start := time.Now()
	c, err = apply(toNowhere)
	if !errors.As(err, &rej) || !rej.Restored || !strings.Contains(rej.Reason, "route configuration ingress_3/0/0: route: unknown cluster 'nowhere'") ||
		!strings.Contains(c.String(), "ingress_3/0/0") {
		t.Fatalf("Apply of a route to a missing cluster = %q, %v; want Envoy's reason, restored", c, err)
	}
	if took := time.Since(start); took > applyTimeout/2 {
		t.Errorf("the refusal took %s: it waited for the listener's warming", took)
	}
	if v := version(ports.Listener); v != "v2" {
		t.Errorf("after the refusal the listener answers %q, want v2", v)
	}
	// The routes it added are gone from the server (Envoy still asks for
	// them while the listeners it took and gave back drain).
	if n := srv.Status()["epoch-0-1"].Resources[ads.RouteType]; n != 2 {
		t.Errorf("the server holds %d route configurations of the epoch after the refusal, want 2", n)
	}

	// A cluster added, then removed.
	spare := strings.Replace(v2, "  clusters:\n", "  clusters:\n  - { name: spare, type: STATIC, load_assignment: { cluster_name: spare } }\n", 1)
	if c, err := apply(spare); err != nil || c.String() != "clusters added spare" {
		t.Fatalf("Apply = %q, %v", c, err)
	}
	if c, err := apply(v2); err != nil || c.String() != "clusters removed spare" {
		t.Fatalf("Apply = %q, %v", c, err)
	}
	body, _ = admin.Get(ctx, "/config_dump?resource=dynamic_active_clusters")
	if strings.Contains(string(body), "spare") {
		t.Errorf("the removed cluster is still active:\n%s", body)
	}
	if c, err := apply(v2); err != nil || !c.Empty() {
		t.Errorf("Apply of the same bootstrap = %q, %v; want nothing changed", c, err)
	}
	if !p.Running() {
		t.Fatal("Envoy exited")
	}
}

// TestExampleBootstrapRunsRewritten runs the repository's example
// bootstrap (admin on a TCP port, free listener ports) as the agent runs it
// with reload_method "auto": Envoy takes the rewritten bootstrap and both
// files whole, and answers through the proxied listener.
func TestExampleBootstrapRunsRewritten(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(envoykit.RepoRoot(t), "envoy.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	admin, front, back := envoykit.FreePort(t), envoykit.FreePort(t), envoykit.FreePort(t)
	text := strings.Replace(string(data), "pipe: { path: /run/envoy-agent/admin.sock, mode: 0600 }",
		fmt.Sprintf("socket_address: { address: 127.0.0.1, port_value: %d }", admin), 1)
	text = strings.ReplaceAll(text, "port_value: 10000", fmt.Sprintf("port_value: %d", front))
	text = strings.ReplaceAll(text, "port_value: 10001", fmt.Sprintf("port_value: %d", back))
	run := runRewritten(t, "envoy.yaml", []byte(text), admin)
	if err := Accepted(context.Background(), run); err != nil {
		t.Errorf("Accepted: %v", err)
	}
	r, err := envoykit.Get(envoykit.URL(front, "/"), 5*time.Second)
	if err != nil || r.Code != 200 || !strings.Contains(r.Body, "hello from the envoy-agent example backend") {
		t.Errorf("GET through the example's listener: %+v %v", r, err)
	}
}

// TestAcceptedSeesARejectedListener: Envoy is LIVE without a listener of
// its LDS file that it could not bind; Accepted says so, with the reason.
func TestAcceptedSeesARejectedListener(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	ports := envoykit.NewPorts(t)
	ports.Upstream = 1
	text, err := envoykit.RenderBootstrap(envoykit.BootstrapOptions{Ports: ports, ExtraListeners: []int{held.Addr().(*net.TCPAddr).Port}})
	if err != nil {
		t.Fatal(err)
	}
	run := runRewritten(t, "envoy.yaml", text, ports.Admin)
	if err := Accepted(context.Background(), run); err == nil || !strings.Contains(err.Error(), "listener ingress_1: cannot bind") {
		t.Errorf("Accepted = %v; want listener ingress_1's bind failure", err)
	}
}

// TestEmptyResourceFiles: a bootstrap with no listeners or clusters runs
// from empty files, and Envoy's version of each is theirs (a start is
// accepted).
func TestEmptyResourceFiles(t *testing.T) {
	admin := envoykit.FreePort(t)
	run := runRewritten(t, "e.yaml", fmt.Appendf(nil, "admin: { address: { socket_address: { address: 127.0.0.1, port_value: %d } } }\n", admin), admin)
	if err := Accepted(context.Background(), run); err != nil {
		t.Errorf("Accepted: %v", err)
	}
}

// runRewritten makes the running copy of the bootstrap text (named name;
// the agent's admin on TCP port admin), parses it, writes what Envoy runs
// into a folder of the test's, serves its routes and secrets from an ADS
// server of the test's and starts a bare Envoy on it (hot restart off)
// until its admin answers LIVE. It returns the epoch Envoy runs as.
func runRewritten(t *testing.T, name string, text []byte, admin int) Running {
	t.Helper()
	text, _, err := RunningCopy(text, name, AgentAdmin{Host: "127.0.0.1", Port: admin})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse(name, text, xds.Convert)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "r")
	srv := newServer(t)
	boot := writeAndServe(t, dir, b, srv, "epoch-0-1")
	out := &envoykit.SyncBuffer{}
	p, err := envoykit.Start(envoykit.Binary(t), append(envoykit.BareArgs(boot, 0), "--disable-hot-restart"), out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	if err := p.WaitReady(admin, 10*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return Running{Dir: dir, Admin: httpAdmin(admin), ADS: srv, Epoch: "epoch-0-1"}
}
