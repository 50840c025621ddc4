package xds

import (
	"crypto/tls"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// fleet is a bootstrap of many HTTP listeners, each with its own route
// configuration, and one TLS listener with one SNI filter chain and
// certificate per name: served over ADS from a Server, or all inline and
// static (for a bare Envoy to compare with).
type fleet struct {
	ports   []int // the HTTP listeners'
	tlsPort int
	certs   []string // PEM, by chain
	keys    []string
	serials []string
}

const router = `http_filters: [{name: envoy.filters.http.router, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}]`

func newFleet(t testing.TB, listeners, secrets int) *fleet {
	ports, err := envoykit.FreePorts(listeners + 1)
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{ports: ports[:listeners], tlsPort: ports[listeners]}
	for i := range secrets {
		c, k, s := pair(t, sni(i))
		f.certs, f.keys, f.serials = append(f.certs, c), append(f.keys, k), append(f.serials, s)
	}
	return f
}

// first is the version of every route configuration at the start.
func first(int) int { return 1 }

func sni(i int) string { return "s" + strconv.Itoa(i) + ".test" }

// routeYAML is listener i's route configuration, answering body.
func routeYAML(i int, body string) string {
	return fmt.Sprintf("{name: r%d, virtual_hosts: [{name: v, domains: [\"*\"], routes: [{match: {prefix: \"/\"}, direct_response: {status: 200, body: {inline_string: %q}}}]}]}", i, body)
}

// secretYAML is chain i's secret, with the pair cert and key.
func secretYAML(i int, cert, key string) string {
	return fmt.Sprintf("{name: s%d, tls_certificate: {certificate_chain: {inline_string: %q}, private_key: {inline_string: %q}}}", i, cert, key)
}

// bootstrap is the fleet's bootstrap: over ADS from s (the epoch's), or
// static when s is nil.
func (f *fleet) bootstrap(t testing.TB, s *Server, epoch string) string {
	var l strings.Builder
	for i, p := range f.ports {
		rc := "route_config: " + routeYAML(i, "r"+strconv.Itoa(i)+"-v1")
		if s != nil {
			rc = fmt.Sprintf("rds: {route_config_name: r%d, config_source: {ads: {}, resource_api_version: V3}}", i)
		}
		fmt.Fprintf(&l, "  - {name: l%d, address: {socket_address: {address: 127.0.0.1, port_value: %d}}, filter_chains: [{filters: [{name: hcm, typed_config: {\"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager, stat_prefix: l%d, %s, %s}}]}]}\n", i, p, i, router, rc)
	}
	if len(f.certs) > 0 {
		fmt.Fprintf(&l, "  - name: tls\n    address: {socket_address: {address: 127.0.0.1, port_value: %d}}\n    listener_filters: [{name: tls, typed_config: {\"@type\": type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector}}]\n    filter_chains:\n", f.tlsPort)
		for i := range f.certs {
			ref := fmt.Sprintf("tls_certificates: [{certificate_chain: {inline_string: %q}, private_key: {inline_string: %q}}]", f.certs[i], f.keys[i])
			if s != nil {
				ref = fmt.Sprintf("tls_certificate_sds_secret_configs: [{name: s%d, sds_config: {ads: {}, resource_api_version: V3}}]", i)
			}
			fmt.Fprintf(&l, "    - {filter_chain_match: {server_names: [%s]}, transport_socket: {name: tls, typed_config: {\"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext, common_tls_context: {%s}}}, filters: [{name: hcm, typed_config: {\"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager, stat_prefix: tls, %s, route_config: {virtual_hosts: [{name: v, domains: [\"*\"], routes: [{match: {prefix: \"/\"}, direct_response: {status: 200, body: {inline_string: %s}}}]}]}}}]}\n", sni(i), ref, router, sni(i))
		}
	}
	if s == nil {
		return "static_resources:\n  listeners:\n" + l.String()
	}
	return adsBootstrap(t, s, epoch, "", l.String())
}

// resources converts the fleet's route configurations (bodies version v)
// and secrets, and says what that cost.
func (f *fleet) resources(t testing.TB, v int) (routes, secrets []Resource, took time.Duration) {
	start := time.Now()
	for i := range f.ports {
		r, err := ConvertYAML(RouteType, []byte(routeYAML(i, fmt.Sprintf("r%d-v%d", i, v))))
		if err != nil {
			t.Fatal(err)
		}
		routes = append(routes, r)
	}
	for i := range f.certs {
		r, err := ConvertYAML(SecretType, []byte(secretYAML(i, f.certs[i], f.keys[i])))
		if err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, r)
	}
	return routes, secrets, time.Since(start)
}

// checkAll asks every listener and every SNI name, in parallel, and fails
// on any answer that is not the expected one: listener i's route
// configuration's version, version(i), and chain i's serial.
func (f *fleet) checkAll(t testing.TB, version func(i int) int) {
	t.Helper()
	var bad atomic.Int64
	var first sync.Once
	var wg sync.WaitGroup
	jobs := make(chan func(), 64)
	for range 8 {
		wg.Go(func() {
			for j := range jobs {
				j()
			}
		})
	}
	report := func(format string, args ...any) {
		bad.Add(1)
		first.Do(func() { t.Errorf(format, args...) })
	}
	for i, p := range f.ports {
		jobs <- func() {
			want := fmt.Sprintf("r%d-v%d", i, version(i))
			if r, err := envoykit.Get(envoykit.URL(p, "/"), 5*time.Second); err != nil || r.Body != want {
				report("listener %d: %v %q, want %q", i, err, r.Body, want)
			}
		}
	}
	for i := range f.certs {
		jobs <- func() {
			if got, err := handshakeSerial(f.tlsPort, sni(i)); err != nil || got != f.serials[i] {
				report("%s: serial %s %v, want %s", sni(i), got, err, f.serials[i])
			}
		}
	}
	close(jobs)
	wg.Wait()
	if n := bad.Load(); n > 0 {
		t.Fatalf("%d of %d answers wrong", n, len(f.ports)+len(f.certs))
	}
}

// TestScale serves 1,000 route configurations and 1,000 certificates over
// ADS to a real Envoy on a host whose fs.inotify.max_user_instances is the
// default 128 (with files, Envoy aborted at 150), beside a bare Envoy on
// the same bootstrap written statically, then changes one route and one
// certificate in place.
func TestScale(t *testing.T) {
	if envoykit.UnitTier() {
		t.Skip("runs Envoy")
	}
	const n = 1000
	f := newFleet(t, n, n)

	static, staticLive := startEnvoy(t, f.bootstrap(t, nil, ""), envoykit.BaseID())
	staticRSS := rss(t, static.Pid())
	f.checkAll(t, first)
	static.Kill()
	<-static.Done()

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	s := listen(t, quietLog{})
	routes, secrets, took := f.resources(t, 1)
	t.Logf("converted %d route configurations and %d secrets in %v (%v each)", n, n, took, took/(2*n))
	if err := s.Set("e0", RouteType, routes); err != nil {
		t.Fatal(err)
	}
	if err := s.Set("e0", SecretType, secrets); err != nil {
		t.Fatal(err)
	}
	ads, adsLive := startEnvoy(t, f.bootstrap(t, s, "e0"), envoykit.BaseID())
	adsRSS := rss(t, ads.Pid())
	t.Logf("LIVE after: static %v, ADS %v; Envoy's RSS: static %d MB, ADS %d MB; inotify instances of the ADS Envoy: %d",
		staticLive.Round(time.Millisecond), adsLive.Round(time.Millisecond), staticRSS>>10, adsRSS>>10, inotifyInstances(t, ads.Pid()))
	f.checkAll(t, first)
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	t.Logf("Go heap in use for the server, its sets and the registry: %d MB", (int64(after.HeapInuse)-int64(before.HeapInuse))>>20)
	st := s.Status()["e0"]
	if len(st.Streams) != 1 || st.Streams[0].Pid != int32(ads.Pid()) {
		t.Fatalf("status: %+v", st.Streams)
	}
	for _, typ := range []Type{RouteType, SecretType} {
		ts := st.Streams[0].Types[typ]
		if len(ts.Subscribed) != n || len(ts.Unknown) != 0 || ts.Acked == "" || ts.Acked != ts.Sent {
			t.Fatalf("%s: subscribed %d, unknown %v, sent %s, acked %s", typ, len(ts.Subscribed), ts.Unknown, ts.Sent, ts.Acked)
		}
		// Envoy asks once per subscription; one response in flight at a
		// time answers them in a few.
		t.Logf("%s: %d requests, %d responses at the start", typ.Noun(), ts.Requests, ts.Responses)
		if ts.Responses > n/20 {
			t.Errorf("%s: %d responses to %d requests: each resent what came before", typ.Noun(), ts.Responses, ts.Requests)
		}
	}

	// One route and one certificate change; connections opened before
	// stay open and are answered.
	const i = n / 2
	conn, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(f.ports[i]))
	if err != nil {
		t.Fatal(err)
	}
	http1 := dialKeptAlive(t, conn, "x")
	tconn, err := tls.Dial("tcp", "127.0.0.1:"+strconv.Itoa(f.tlsPort), &tls.Config{InsecureSkipVerify: true, ServerName: sni(i)})
	if err != nil {
		t.Fatal(err)
	}
	overTLS := dialKeptAlive(t, tconn, sni(i))
	for _, k := range []*keptAlive{http1, overTLS} {
		if _, closing, err := k.get(); err != nil || closing {
			t.Fatalf("before the change: %v, closing %v", err, closing)
		}
	}
	r, err := ConvertYAML(RouteType, []byte(routeYAML(i, fmt.Sprintf("r%d-v2", i))))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, err := s.Update(withTimeout(t, 30*time.Second), "e0", RouteType, []Resource{r}, nil)
	routeAck := time.Since(start)
	if err != nil || out.Version == "" {
		t.Fatalf("route update: %+v %v", out, err)
	}
	cert, key, serial := pair(t, sni(i))
	sec, err := ConvertYAML(SecretType, []byte(secretYAML(i, cert, key)))
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	outs, err := s.UpdateSecret(withTimeout(t, 30*time.Second), sec)
	secretAck := time.Since(start)
	if err != nil || outs["e0"].Version == "" {
		t.Fatalf("secret update: %+v %v", outs, err)
	}
	t.Logf("push to ACK at %d of each: a route %v, a secret %v", n, routeAck.Round(time.Microsecond), secretAck.Round(time.Microsecond))
	f.serials[i] = serial
	if !envoykit.Eventually(5*time.Second, func() bool {
		r, err := envoykit.Get(envoykit.URL(f.ports[i], "/"), time.Second)
		got, _ := handshakeSerial(f.tlsPort, sni(i))
		return err == nil && r.Body == fmt.Sprintf("r%d-v2", i) && got == serial
	}) {
		t.Fatal("the new route or certificate was not served after Envoy's ACK")
	}
	// Each push carried only what changed: the other 999 of each go on
	// being served as they were.
	f.checkAll(t, func(j int) int {
		if j == i {
			return 2
		}
		return 1
	})
	for _, k := range []*keptAlive{http1, overTLS} {
		if body, closing, err := k.get(); err != nil || closing {
			t.Fatalf("a connection opened before the change: %q %v, closing %v", body, err, closing)
		}
	}
	if body, _, _ := http1.get(); body != fmt.Sprintf("r%d-v2", i) {
		t.Fatalf("the kept-alive connection got %q after the route change", body)
	}
	if st := s.Status()["e0"]; !ads.Running() || len(st.Streams) != 1 || int(st.Streams[0].Pid) != ads.Pid() {
		t.Fatalf("Envoy is not the same process: %+v", st.Streams)
	}
}
