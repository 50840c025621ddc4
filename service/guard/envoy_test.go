//go:build linux

package guard

// The signals against a real Envoy 1.40.0 under a load that does not
// retry: each test makes one bad change of the kinds a reload can carry,
// the way the agent applies one in place (an LDS or CDS file renamed into
// place), reads Envoy every second as the agent does, and says which
// signal fired and how long after the change. docs/design.md ("The reload
// guard") quotes what they print. Run inside nsrun.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"text/template"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy/adminapi"
	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// warmReads are the reads before a change: the baseline's.
const warmReads = 6

// upstream is the application behind Envoy: GET / answers 200 (every
// failEvery-th request 503, when set) after delay; GET /healthz answers
// healthz (200 when 0); any other path 404.
type upstream struct {
	port      int
	n         atomic.Int64
	failEvery atomic.Int64
	delay     atomic.Int64 // nanoseconds
	healthz   atomic.Int64 // status; 0 is 200
}

func newUpstream(t *testing.T) *upstream {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{port: ln.Addr().(*net.TCPAddr).Port}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
			w.WriteHeader(int(max(u.healthz.Load(), 200)))
			return
		case "/":
		default:
			http.NotFound(w, r)
			return
		}
		time.Sleep(time.Duration(u.delay.Load()))
		if e := u.failEvery.Load(); e > 0 && u.n.Add(1)%e == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return u
}

// edit is what the LDS and CDS files say.
type edit struct {
	Version       int
	Port          int    // the listener's
	Cluster       string // the route of /
	Timeout       string // the route's
	Healthz       string // the cluster of the route of /healthz
	Upstream      int
	Dead          int    // a port nothing listens on
	HealthPath    string // the active health check of cluster web
	ServerNames   string // a filter chain match on SNI, when set
	ResponseValue string
}

var ldsTmpl = template.Must(template.New("lds").Parse(`version_info: "{{.Version}}"
resources:
- "@type": type.googleapis.com/envoy.config.listener.v3.Listener
  name: ingress
  address: { socket_address: { address: 127.0.0.1, port_value: {{.Port}} } }
  filter_chains:
  - {{if .ServerNames}}filter_chain_match: { server_names: ["{{.ServerNames}}"] }
    {{end}}filters:
    - name: envoy.filters.network.http_connection_manager
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
        stat_prefix: ingress
        route_config:
          virtual_hosts:
          - name: all
            domains: ["*"]
            response_headers_to_add: [{ header: { key: x-config-version, value: "{{.ResponseValue}}" } }]
            routes:
            - match: { path: "/healthz" }
              route: { cluster: {{.Healthz}}, timeout: 2s }
            - match: { prefix: "/" }
              route: { cluster: {{.Cluster}}, timeout: {{.Timeout}} }
        http_filters:
        - name: envoy.filters.http.router
          typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }
`))

var cdsTmpl = template.Must(template.New("cds").Parse(`version_info: "{{.Version}}"
resources:
- "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: web
  type: STATIC
  connect_timeout: 1s
  health_checks:
  - timeout: 1s
    interval: 1s
    no_traffic_interval: 1s
    unhealthy_threshold: 2
    healthy_threshold: 1
    http_health_check: { path: "{{.HealthPath}}" }
  load_assignment:
    cluster_name: web
    endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: {{.Upstream}} } } } }] }]
- "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: dead
  type: STATIC
  connect_timeout: 1s
  load_assignment:
    cluster_name: dead
    endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: {{.Dead}} } } } }] }]
`))

// rig is one Envoy running its listeners and clusters from LDS and CDS
// files, an upstream, a load, and the guard's History of it.
type rig struct {
	t      *testing.T
	bin    string
	dir    string
	boot   string
	baseID uint32
	admin  int
	edit   edit
	up     *upstream
	load   *dialLoad
	h      *History
	url    string // the probe's, when set
	client *http.Client
}

func newRig(t *testing.T) *rig {
	bin := envoykit.Binary(t)
	dir := t.TempDir()
	ports := envoykit.NewPorts(t)
	up := newUpstream(t)
	r := &rig{t: t, bin: bin, dir: dir, boot: filepath.Join(dir, "boot.yaml"), baseID: envoykit.BaseID(), admin: ports.Admin, up: up,
		h: NewHistory(), client: NewProbeClient(),
		edit: edit{Version: 1, Port: ports.Listener, Cluster: "web", Timeout: "2s", Healthz: "web", Upstream: up.port,
			Dead: envoykit.FreePort(t), HealthPath: "/healthz", ResponseValue: "1"}}
	boot := fmt.Sprintf(`node: { id: guard, cluster: guard }
admin: { address: { socket_address: { address: 127.0.0.1, port_value: %d } } }
dynamic_resources:
  lds_config: { path_config_source: { path: %s }, resource_api_version: V3 }
  cds_config: { path_config_source: { path: %s }, resource_api_version: V3 }
`, r.admin, filepath.Join(dir, "lds.yaml"), filepath.Join(dir, "cds.yaml"))
	if err := os.WriteFile(r.boot, []byte(boot), 0o600); err != nil {
		t.Fatal(err)
	}
	r.write()
	r.start(0)
	return r
}

// write puts the edit's files in place, by a rename as the agent does.
func (r *rig) write() {
	for name, tmpl := range map[string]*template.Template{"lds.yaml": ldsTmpl, "cds.yaml": cdsTmpl} {
		var b strings.Builder
		if err := tmpl.Execute(&b, r.edit); err != nil {
			r.t.Fatal(err)
		}
		if err := envoykit.WriteFileAtomic(filepath.Join(r.dir, name), []byte(b.String())); err != nil {
			r.t.Fatal(err)
		}
	}
}

// start runs epoch epoch (a hot restart of the one before, when above 0)
// and waits until it serves.
func (r *rig) start(epoch int) {
	args := append(envoykit.BareArgs(r.boot, r.baseID), "--restart-epoch", strconv.Itoa(epoch), "--drain-time-s", "1", "--parent-shutdown-time-s", "2")
	p, err := envoykit.Start(r.bin, args, io.Discard)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() {
		_ = syscall.Kill(p.Pid(), syscall.SIGKILL)
		<-p.Done()
		envoykit.RemoveSharedMemory(r.baseID)
	})
	if !envoykit.Eventually(20*time.Second, func() bool {
		si, err := r.serverInfo()
		return err == nil && si.State == "LIVE" && si.CommandLineOptions.RestartEpoch == epoch
	}) {
		r.t.Fatalf("epoch %d is not LIVE", epoch)
	}
	r.applied(r.edit.Version)
}

func (r *rig) get(path string) ([]byte, error) {
	resp, err := r.client.Get("http://127.0.0.1:" + strconv.Itoa(r.admin) + path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

func (r *rig) serverInfo() (adminapi.ServerInfo, error) {
	b, err := r.get("/server_info")
	if err != nil {
		return adminapi.ServerInfo{}, err
	}
	return adminapi.ParseServerInfo(b)
}

// applied waits until Envoy took version of both files.
func (r *rig) applied(version int) {
	want := strconv.Quote(strconv.Itoa(version))
	if !envoykit.Eventually(10*time.Second, func() bool {
		b, err := r.get("/stats?filter=" + `^(listener_manager\.lds|cluster_manager\.cds)\.version_text$`)
		return err == nil && strings.Count(string(b), ": "+want) == 2
	}) {
		r.t.Fatalf("Envoy did not take version %d of the LDS and CDS files", version)
	}
}

// read is one read of Envoy, as the agent's.
func (r *rig) read() Sample {
	s := Sample{At: time.Now()}
	body, err := r.get(StatsPath)
	if err != nil {
		r.t.Fatalf("read stats: %v", err)
	}
	if s.Stats, err = ParseStats(body); err != nil {
		r.t.Fatal(err)
	}
	body, err = r.get("/listeners?format=json")
	if err != nil {
		r.t.Fatal(err)
	}
	ls, err := adminapi.ParseListeners(body)
	if err != nil {
		r.t.Fatal(err)
	}
	for _, l := range ls {
		s.Listening = append(s.Listening, l.Address)
	}
	if r.url != "" {
		ctx, cancel := context.WithTimeout(context.Background(), ProbeTimeout)
		p := Ask(ctx, r.client, r.url)
		cancel()
		s.Probe = &p
	}
	return s
}

// warm starts the load and reads warmReads times, a second apart.
func (r *rig) warm() {
	r.load = startDialLoad(r.t, r.edit.Port)
	tick := time.NewTicker(ReadEvery)
	defer tick.Stop()
	for range warmReads {
		r.h.Add(r.read())
		<-tick.C
	}
}

// change applies the edit in place and judges the window after it: the
// verdict and how long after the change it came.
func (r *rig) change(window time.Duration, apply func()) (Verdict, time.Duration) {
	before := r.load.counts()
	apply()
	applied := time.Now()
	w := r.h.Open(DefaultThresholds(), applied, window)
	tick := time.NewTicker(ReadEvery)
	defer tick.Stop()
	for {
		<-tick.C
		r.h.Add(r.read())
		if v := w.Judge(r.h, time.Now()); v.Regression || v.Ended {
			took := time.Since(applied)
			now := r.load.counts()
			r.t.Logf("load during the window: %d answered 200, %d failed (%s)", now.ok-before.ok, now.failed-before.failed, r.load.lastErr())
			r.t.Logf("figures after: %s", figuresText(r.h.Since(w.start)))
			return v, took
		}
	}
}

// reloadInPlace is apply for change: the next version of the edit, taken.
func (r *rig) reloadInPlace(e func(*edit)) func() {
	return func() {
		e(&r.edit)
		r.edit.Version++
		r.write()
		r.applied(r.edit.Version)
	}
}

func figuresText(f Figures) string {
	var b strings.Builder
	fmt.Fprintf(&b, "downstream %s", f.Downstream.text("requests"))
	for _, name := range sortedKeys(f.Clusters) {
		c := f.Clusters[name]
		fmt.Fprintf(&b, "; cluster %s: 5xx %s, connects failed %s, timeouts %s, %d of %d hosts healthy",
			name, c.Answers.text("requests"), c.Connects.text("attempts"), c.Timeouts.text("requests"), c.Healthy, c.Hosts)
	}
	for _, k := range sortedKeys(f.Listeners) {
		l := f.Listeners[k]
		fmt.Fprintf(&b, "; listener %s (listening %v): closed at once %s", l.Address, l.Listening, l.Refused.text("connections"))
	}
	return b.String()
}

// expect fails the test unless v is a regression whose findings include
// signal, within limit.
func expect(t *testing.T, v Verdict, took time.Duration, signal Signal, limit time.Duration) {
	t.Helper()
	var all []string
	found := false
	for _, f := range v.Findings {
		all = append(all, string(f.Signal)+" ("+f.String()+")")
		found = found || f.Signal == signal
	}
	t.Logf("verdict after %s: regression %v: %s", took.Round(100*time.Millisecond), v.Regression, strings.Join(all, "; "))
	if !v.Regression || !found {
		t.Fatalf("want a regression of %s, got %+v", signal, v)
	}
	if took > limit {
		t.Errorf("detected after %s, want within %s", took, limit)
	}
}

// detectWithin bounds the detection in these tests: enough requests for
// MinRequests at the load's rate, then FailuresInARow reads, with room for
// a shared machine.
const detectWithin = 8 * time.Second

func TestSignalRouteToRefusingCluster(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.warm()
	v, took := r.change(10*time.Second, r.reloadInPlace(func(e *edit) { e.Cluster = "dead" }))
	expect(t, v, took, Downstream5xx, detectWithin)
	expect(t, v, took, Upstream5xx, detectWithin)
	expect(t, v, took, ConnectFailures, detectWithin)
}

func TestSignalHostsUnhealthy(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.warm()
	v, took := r.change(10*time.Second, r.reloadInPlace(func(e *edit) { e.HealthPath = "/healthz-typo" }))
	expect(t, v, took, HealthyHosts, detectWithin)
}

func TestSignalListenerMoved(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.warm()
	moved := envoykit.FreePort(t)
	v, took := r.change(10*time.Second, r.reloadInPlace(func(e *edit) { e.Port = moved }))
	expect(t, v, took, ListenerGone, detectWithin)
}

func TestSignalListenerRefuses(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.warm()
	v, took := r.change(10*time.Second, r.reloadInPlace(func(e *edit) { e.ServerNames = "www.example.com" }))
	expect(t, v, took, ListenerRefused, detectWithin)
}

func TestSignalTimeouts(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.up.delay.Store(int64(20 * time.Millisecond))
	r.warm()
	v, took := r.change(10*time.Second, r.reloadInPlace(func(e *edit) { e.Timeout = "0.005s" }))
	expect(t, v, took, Timeouts, detectWithin)
}

func TestSignalURL(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.url = "http://127.0.0.1:" + strconv.Itoa(r.edit.Port) + "/healthz"
	r.warm()
	v, took := r.change(10*time.Second, r.reloadInPlace(func(e *edit) { e.Healthz = "dead" }))
	expect(t, v, took, URL, detectWithin)
	if len(v.Findings) != 1 {
		t.Errorf("only the URL's route broke, yet: %v", v.Findings)
	}
}

// TestGoodReloadsUnderBackground5xx: with 1 % of the upstream's answers
// 503, good reloads (a response header changed in place, and hot restarts
// into the same files) are never called regressions.
func TestGoodReloadsUnderBackground5xx(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.up.failEvery.Store(100)
	r.warm()
	const inPlace, hotRestarts = 8, 2
	const window = 4 * time.Second
	for i := range inPlace + hotRestarts {
		var v Verdict
		if i < inPlace {
			v, _ = r.change(window, r.reloadInPlace(func(e *edit) { e.ResponseValue = strconv.Itoa(i) }))
		} else {
			epoch := i - inPlace + 1
			v, _ = r.change(window, func() { r.start(epoch) })
		}
		if v.Regression {
			t.Errorf("good reload %d called a regression: %s", i+1, v.Reason())
		} else {
			t.Logf("good reload %d: %s", i+1, v.Summary)
		}
	}
	c := r.load.counts()
	t.Logf("load: %d answered 200, %d failed (503 from the upstream's 1%%: %s)", c.ok, c.failed, r.load.lastErr())
}

// loadPause is the load's pause between two requests: a few hundred a
// second, enough for MinRequests within a read, light on a shared machine.
const loadPause = 2 * time.Millisecond

// dialLoad sends GET / on a new connection each, one at a time, never
// retrying (as the fleet test's load.py), and counts the answers.
type dialLoad struct {
	ok, failed atomic.Int64
	last       atomic.Value // string: the latest failure
}

type loadCounts struct{ ok, failed int64 }

func (l *dialLoad) counts() loadCounts { return loadCounts{l.ok.Load(), l.failed.Load()} }

func (l *dialLoad) lastErr() string {
	s, _ := l.last.Load().(string)
	return s
}

func startDialLoad(t *testing.T, port int) *dialLoad {
	l := &dialLoad{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	addr := "127.0.0.1:" + strconv.Itoa(port)
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if err := getOnce(addr); err != nil {
				l.failed.Add(1)
				l.last.Store(err.Error())
			} else {
				l.ok.Add(1)
			}
			time.Sleep(loadPause)
		}
	}()
	return l
}

// getOnce is one GET / on a new connection: nil for a 200.
func getOnce(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: guard\r\nConnection: close\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("http_%d", resp.StatusCode)
	}
	return nil
}
