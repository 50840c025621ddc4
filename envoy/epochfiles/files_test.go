//go:build linux

package epochfiles

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envoy-agent/envoy-agent/envoy/xds"
	"github.com/envoy-agent/envoy-agent/envoy/xds/ads"
)

type quiet struct{}

func (quiet) Infof(string, ...any)  {}
func (quiet) Warnf(string, ...any)  {}
func (quiet) Errorf(string, ...any) {}

// splitDoc is a bootstrap of one HTTP listener (a route configuration) and
// one static secret its TLS context names.
const splitDoc = `node: { id: node1, cluster: c1 }
static_resources:
  secrets:
  - { name: srv, tls_certificate: { certificate_chain: { inline_string: C }, private_key: { inline_string: K } } }
  listeners:
  - name: web
    address: { socket_address: { address: 127.0.0.1, port_value: 10000 } }
    filter_chains:
    - transport_socket: { name: tls, typed_config: { "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext, common_tls_context: { tls_certificate_sds_secret_configs: [{ name: srv }] } } }
      filters: [{ name: hcm, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager, stat_prefix: web, route_config: { virtual_hosts: [{ name: all, domains: ["*"], routes: [{ match: { prefix: "/" }, direct_response: { status: 200 } }] }] }, http_filters: [] } }]
`

// An epoch's files: named as its copy, its routes and secrets set on the
// ADS server before it starts, forgotten there when it goes; an adopted
// epoch (a live upgrade) is set again from its copy.
func TestEpochOnTheServer(t *testing.T) {
	run := t.TempDir()
	srv, err := xds.Listen(run, quiet{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	var c Copier
	src := filepath.Join(t.TempDir(), "envoy.yaml")
	if err := os.WriteFile(src, []byte(splitDoc), 0o600); err != nil {
		t.Fatal(err)
	}
	cp, err := c.Copy(run, src, src, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	copied := cp.Path
	if got := EpochName(copied); got != "epoch-3-1" {
		t.Fatalf("EpochName(%s) = %q, want epoch-3-1", copied, got)
	}
	f, boot, why := ForEpoch(cp, src, true, srv)
	if why != nil || f.Epoch != "epoch-3-1" || f.Resources == "" || filepath.Dir(boot) != f.Resources {
		t.Fatalf("ForEpoch = %+v, %s, %v", f, boot, why)
	}
	text, err := os.ReadFile(boot)
	if err != nil || !strings.Contains(string(text), `"authority": "epoch-3-1"`) {
		t.Fatalf("the bootstrap Envoy runs does not name the epoch on the server: %v\n%s", err, text)
	}
	set := srv.Status()["epoch-3-1"].Resources
	if set[ads.RouteType] != 1 || set[ads.SecretType] != 1 {
		t.Fatalf("the server holds %v for the epoch, want a route configuration and a secret", set)
	}

	// A live upgrade: a new server, the epoch adopted from its copy.
	srv2 := xds.New(filepath.Join(t.TempDir(), xds.SocketName), quiet{})
	adopted, err := Adopted(copied, src, srv2)
	if err != nil || adopted.Epoch != "epoch-3-1" || adopted.Resources != f.Resources {
		t.Fatalf("Adopted = %+v, %v", adopted, err)
	}
	if got := srv2.Status()["epoch-3-1"].Resources; got[ads.RouteType] != 1 || got[ads.SecretType] != 1 {
		t.Fatalf("the adopting server holds %v for the epoch", got)
	}

	f.Remove()
	if _, ok := srv.Status()["epoch-3-1"]; ok {
		t.Error("the server still holds the removed epoch")
	}
	if _, err := os.Stat(f.Resources); !os.IsNotExist(err) {
		t.Errorf("the resource folder: %v, want it gone", err)
	}

	// Run as it is (reload_method "hot_restart"): nothing read from the
	// server, nothing wired.
	if cp, err = c.Copy(run, src, src, 4, nil); err != nil {
		t.Fatal(err)
	}
	f, boot, why = ForEpoch(cp, src, false, srv)
	if why != nil || f.Epoch != "" || boot != cp.Path {
		t.Fatalf("ForEpoch as it is = %+v, %s, %v", f, boot, why)
	}
	f.Remove()
}
