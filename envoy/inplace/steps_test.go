package inplace

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy/xds/ads"
)

// stepsDoc is a bootstrap for the order of Apply's steps: listener web
// (its routes answer status, its TLS certificate is the secret srv with
// chain) and listener other (a tcp_proxy whose stat prefix is otherPrefix),
// cluster app (connect_timeout appTimeout), then extra listeners and
// clusters and secrets.
func stepsDoc(status int, chain, otherPrefix, appTimeout, listeners, clusters, secrets string) string {
	return fmt.Sprintf(`node: { id: n, cluster: c }
static_resources:
  listeners:
  - name: web
    address: { socket_address: { address: 127.0.0.1, port_value: 10000 } }
    filter_chains:
    - transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
          common_tls_context: { tls_certificate_sds_secret_configs: [{ name: srv }] }
      filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: web
          route_config: { virtual_hosts: [{ name: all, domains: ["*"], routes: [{ match: { prefix: "/" }, direct_response: { status: %d } }] }] }
  - name: other
    address: { socket_address: { address: 127.0.0.1, port_value: 10001 } }
    filter_chains: [{ filters: [{ name: envoy.filters.network.tcp_proxy, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: %s, cluster: app } }] }]
%s  clusters:
  - { name: app, type: STATIC, connect_timeout: %s }
%s  secrets:
  - { name: srv, tls_certificate: { certificate_chain: { inline_string: %q }, private_key: { inline_string: "K" } } }
%s`, status, otherPrefix, listeners, appTimeout, clusters, chain, secrets)
}

const (
	// newListener is a listener with routes of its own, whose TLS
	// certificate is the secret srv2.
	newListener = `  - name: new
    address: { socket_address: { address: 127.0.0.1, port_value: 10002 } }
    filter_chains:
    - transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
          common_tls_context: { tls_certificate_sds_secret_configs: [{ name: srv2 }] }
      filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: new
          route_config: { virtual_hosts: [{ name: all, domains: ["*"], routes: [{ match: { prefix: "/" }, route: { cluster: spare } }] }] }
`
	takenListener = `  - name: taken
    address: { socket_address: { address: 127.0.0.1, port_value: 1 } }
    filter_chains: [{ filters: [{ name: envoy.filters.network.tcp_proxy, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: t, cluster: app } }] }]
`
	spareCluster = "  - { name: spare, type: STATIC }\n"
	authzCluster = "  - { name: authz, type: STATIC }\n"
	srv2Secret   = "  - { name: srv2, tls_certificate: { certificate_chain: { inline_string: C2 }, private_key: { inline_string: K2 } } }\n"
)

// startSteps writes the files of the bootstrap text into a folder of the
// test's and has a fake Envoy (fakeEnvoy) read them, and serves it the
// route configurations and secrets.
func startSteps(t *testing.T, text string) (*Bootstrap, string, *fakeEnvoy) {
	t.Helper()
	b := parse(t, text)
	dir := filepath.Join(t.TempDir(), "r")
	if _, err := Write(dir, b, Wire{Socket: "/run/x/xds.sock", Epoch: fakeEpoch}); err != nil {
		t.Fatal(err)
	}
	f := newFakeEnvoy(dir)
	f.serve(b)
	if err := Accepted(context.Background(), f.running()); err != nil {
		t.Fatalf("Accepted: %v", err)
	}
	f.log = nil
	return b, dir, f
}

// servedAs reports whether the fake serves exactly b's route
// configurations and secrets.
func (f *fakeEnvoy) servedAs(b *Bootstrap) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, t := range []ads.Type{ads.RouteType, ads.SecretType} {
		want := map[string]ads.Resource{}
		for _, r := range b.Served(t) {
			want[r.Name] = r
		}
		if !maps.EqualFunc(f.served[t], want, func(a, b ads.Resource) bool { return a.Sum == b.Sum }) {
			return false
		}
	}
	return true
}

// folder is every file of dir and its text.
func folder(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(data)
	}
	return out
}

// TestApplyOrder: every kind of change at once reaches Envoy in two
// stages: first what can fail on this host and existing listeners do not
// serve (the added secret and route over ADS, the added cluster, warm, the
// added listener, warm, each beside the previous versions of what is
// updated), then what existing listeners serve (the cluster updated, the
// secret, the route, the listener updated, the cluster removed).
func TestApplyOrder(t *testing.T) {
	old, dir, f := startSteps(t, stepsDoc(200, "A", "other", "1s", "", authzCluster, ""))
	f.warmReads = 2
	next := parse(t, stepsDoc(503, "B", "other2", "2s", newListener, spareCluster, srv2Secret))
	c, err := Compare(old, next)
	want := "listeners added new; listeners updated other; routes added new/0/0; routes updated web/0/0; clusters added spare; clusters updated app; clusters removed authz; secrets added srv2; secrets updated srv"
	if err != nil || c.String() != want {
		t.Fatalf("Compare = %q, %v", c, err)
	}
	if err := Apply(context.Background(), f.running(), old, next, c); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	wantLog := []string{
		"took secrets srv2",
		"took route configurations new/0/0",
		"took cds.yaml app,spare,authz", // app as it was
		"took lds.yaml web,other,new",   // other as it was
		"took cds.yaml app,spare,authz", // app updated
		"took secrets srv",
		"took route configurations web/0/0",
		"took lds.yaml web,other,new", // other updated
		"took cds.yaml app,spare",
	}
	if got := f.reads(); !slices.Equal(got, wantLog) {
		t.Errorf("Envoy read\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantLog, "\n"))
	}
	cdsTexts := f.history[cdsFile]
	if len(cdsTexts) != 4 || !strings.Contains(cdsTexts[1], `"connect_timeout": "1s"`) || !strings.Contains(cdsTexts[2], `"connect_timeout": "2s"`) {
		t.Errorf("the cluster files Envoy read: %q", cdsTexts)
	}
	ldsTexts := f.history[ldsFile]
	if len(ldsTexts) != 3 || !strings.Contains(ldsTexts[1], `"stat_prefix": "other"`) || !strings.Contains(ldsTexts[2], `"stat_prefix": "other2"`) {
		t.Errorf("the listener files Envoy read: %q", ldsTexts)
	}
	// Each warm step read the warming gauge until it was back down.
	if f.gauge[cds.warming] != 4 || f.gauge[lds.warming] != 4 {
		t.Errorf("warming gauge reads %v, want 4 each (before, twice warming, then warm)", f.gauge)
	}
	if !sameFiles(folder(t, dir), filesOf(t, next)) {
		t.Errorf("the folder after Apply is not what Write makes of the new bootstrap")
	}
	if !f.servedAs(next) {
		t.Errorf("the routes and secrets served after Apply are not the new bootstrap's")
	}
}

// filesOf is what the resource folder holds for b, but its bootstrap.
func filesOf(t *testing.T, b *Bootstrap) map[string]string {
	t.Helper()
	out := map[string]string{}
	add := func(name string, data []byte, err error) {
		if err != nil {
			t.Fatal(err)
		}
		out[name] = string(data)
	}
	lds, err := b.ldsData("epoch-0-1")
	add(ldsFile, lds, err)
	cds, err := b.cdsData("epoch-0-1")
	add(cdsFile, cds, err)
	return out
}

// sameFiles compares two folders but their bootstraps.
func sameFiles(a, b map[string]string) bool {
	delete(a, bootstrapFile)
	delete(b, bootstrapFile)
	return maps.Equal(a, b)
}

// TestApplyRefusedOnTheHost: a listener whose port is taken, beside a
// route and a cluster change, is refused at the first stage: Envoy read
// neither the route nor the cluster, and the listeners are put back.
func TestApplyRefusedOnTheHost(t *testing.T) {
	old, dir, f := startSteps(t, stepsDoc(200, "A", "other", "1s", "", "", ""))
	before := folder(t, dir)
	f.refuse = func(file string, data []byte) (string, string) {
		if file == ldsFile && strings.Contains(string(data), "taken") {
			return "taken", "cannot bind '127.0.0.1:1': Address already in use"
		}
		return "", ""
	}
	next := parse(t, stepsDoc(503, "A", "other", "2s", takenListener, "", ""))
	c, _ := Compare(old, next)
	err := Apply(context.Background(), f.running(), old, next, c)
	var rej *RejectedError
	if !errors.As(err, &rej) || !rej.Restored || !strings.Contains(rej.Reason, "listener taken: cannot bind") {
		t.Fatalf("Apply = %v; want a RejectedError naming the bind, restored", err)
	}
	if got, want := f.reads(), []string{"refused lds.yaml", "took lds.yaml web,other"}; !slices.Equal(got, want) {
		t.Errorf("Envoy read %q, want %q: nothing of the route or the cluster", got, want)
	}
	if !sameFiles(folder(t, dir), before) {
		t.Errorf("the folder was not put back")
	}
}

// TestApplyRefusedLater: a route Envoy refuses at the second stage (its
// NACK's reason, as Envoy gave it) puts back, in reverse order, the
// listeners and clusters the first stage added, and the route and secret
// it added (the refused route needs nothing: Envoy kept the one it had).
func TestApplyRefusedLater(t *testing.T) {
	old, dir, f := startSteps(t, stepsDoc(200, "A", "other", "1s", "", "", ""))
	before := folder(t, dir)
	served := old.Served(ads.RouteType)[0]
	f.refuseADS = func(r ads.Resource) string {
		if r.Name == served.Name && r.Sum != served.Sum {
			return "route: unknown cluster 'nowhere'"
		}
		return ""
	}
	next := parse(t, stepsDoc(503, "A", "other", "1s", newListener, spareCluster, srv2Secret))
	c, _ := Compare(old, next)
	err := Apply(context.Background(), f.running(), old, next, c)
	var rej *RejectedError
	if !errors.As(err, &rej) || !rej.Restored || !strings.Contains(rej.Reason, "route configuration web/0/0: route: unknown cluster 'nowhere'") {
		t.Fatalf("Apply = %v; want a RejectedError with Envoy's reason for the route, restored", err)
	}
	got := f.reads()
	want := []string{"refused route configurations web/0/0", "took lds.yaml web,other", "took cds.yaml app",
		"removed route configurations new/0/0", "removed secrets srv2"}
	if len(got) < len(want) || !slices.Equal(got[len(got)-len(want):], want) {
		t.Errorf("Envoy read\n%s\nwant it to end with the put-back\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !sameFiles(folder(t, dir), before) || !f.servedAs(old) {
		t.Errorf("the folder or the routes and secrets served were not put back")
	}
}

// TestApplyWaitsForWarmth: an added cluster that stays warming fails the
// apply when its time is up, and the clusters are put back.
func TestApplyWaitsForWarmth(t *testing.T) {
	old, _, f := startSteps(t, stepsDoc(200, "A", "other", "1s", "", "", ""))
	f.warmReads = 1 << 30
	next := parse(t, stepsDoc(200, "A", "other", "1s", "", spareCluster, ""))
	c, _ := Compare(old, next)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := Apply(ctx, f.running(), old, next, c)
	var rej *RejectedError
	if !errors.As(err, &rej) || !rej.Restored || !strings.Contains(rej.Reason, "were still warming") {
		t.Fatalf("Apply = %v; want a RejectedError saying the clusters were still warming, restored", err)
	}
	if got, want := f.reads(), []string{"took cds.yaml app,spare", "took cds.yaml app"}; !slices.Equal(got, want) {
		t.Errorf("Envoy read %q, want %q", got, want)
	}
}

// TestApplyNothingOrUnwritable: an empty change reads nothing; a folder
// that is not absolute fails before any file is written.
func TestApplyNothingOrUnwritable(t *testing.T) {
	old, _, f := startSteps(t, stepsDoc(200, "A", "other", "1s", "", "", ""))
	if err := Apply(context.Background(), f.running(), old, old, Change{}); err != nil || len(f.reads()) != 0 {
		t.Errorf("Apply of nothing = %v, read %q", err, f.reads())
	}
	next := parse(t, stepsDoc(200, "A", "other", "1s", "", spareCluster, ""))
	c, _ := Compare(old, next)
	var rej *RejectedError
	r := f.running()
	r.Dir = "relative/r"
	if err := Apply(context.Background(), r, old, next, c); err == nil || errors.As(err, &rej) {
		t.Errorf("Apply into a relative folder = %v, want a plain error", err)
	}
	unconverted, err := Parse("envoy.yaml", []byte(stepsDoc(503, "A", "other", "1s", "", "", "")), nil)
	if err != nil {
		t.Fatal(err)
	}
	c, _ = Compare(old, unconverted)
	if err := Apply(context.Background(), f.running(), old, unconverted, c); err == nil || errors.As(err, &rej) || len(f.reads()) != 0 {
		t.Errorf("Apply of a bootstrap parsed without conversion = %v, read %q; want a plain error and nothing read", err, f.reads())
	}
}

// TestAcceptedByTheFake: a start whose listener Envoy refused is not
// accepted, with Envoy's reason.
func TestAcceptedByTheFake(t *testing.T) {
	b := parse(t, stepsDoc(200, "A", "other", "1s", "", "", ""))
	dir := filepath.Join(t.TempDir(), "r")
	if _, err := Write(dir, b, Wire{Socket: "/run/x/xds.sock", Epoch: fakeEpoch}); err != nil {
		t.Fatal(err)
	}
	f := newFakeEnvoy(dir)
	f.serve(b)
	f.refuse = func(file string, _ []byte) (string, string) {
		if file == ldsFile {
			return "other", "cannot bind '127.0.0.1:10001': Address already in use"
		}
		return "", ""
	}
	if err := Accepted(context.Background(), f.running()); err == nil || !strings.Contains(err.Error(), "listener other: cannot bind") {
		t.Errorf("Accepted = %v; want listener other's bind failure", err)
	}
}

// TestFileVersion reads the version of a resource file as the agent writes
// it, and as an agent before it wrote it (a live upgrade adopts its files).
func TestFileVersion(t *testing.T) {
	data, err := resourceData(listenerType, nil, "epoch-0-1")
	if err != nil {
		t.Fatal(err)
	}
	for text, want := range map[string]string{
		string(data): "e3b0c44298fc1c14",
		"version_info: \"0123456789abcdef\"\nresources: []\n": "0123456789abcdef",
		"resources: []\n":             "",
		"{\n  \"resources\": []\n}\n": "",
	} {
		if got := fileVersion([]byte(text)); got != want {
			t.Errorf("fileVersion(%q) = %q, want %q", text, got, want)
		}
	}
}
