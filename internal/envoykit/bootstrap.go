package envoykit

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"text/template"
	"time"
)

// BootstrapOptions shape a bootstrap: HTTP listeners on 127.0.0.1 that route
// everything to the upstream.
type BootstrapOptions struct {
	Ports
	// ExtraListeners are more listeners like the first one, on these ports.
	ExtraListeners []int
	// InitDelay keeps Envoy INITIALIZING for about this long: CDS from an
	// xDS server that is not there, with this initial fetch timeout.
	InitDelay time.Duration
	// AdminAddress overrides the admin bind address (default 127.0.0.1).
	AdminAddress string
	// AdminSocket puts the admin on this unix socket (mode 0600) instead of
	// a TCP port.
	AdminSocket string
	// ResponseHeader, when set, is added to every proxied response as
	// x-config-version.
	ResponseHeader string
	// ExtraResponseHeader, when set, is the ExtraListeners' x-config-version
	// instead of ResponseHeader: a change of ResponseHeader alone then
	// changes the first listener's route only.
	ExtraResponseHeader string
	// AccessLog, when set, is a file every listener writes one line per request to: the
	// request's path.
	AccessLog string
}

var bootstrapTmpl = template.Must(template.New("bootstrap").Parse(`node: { id: envoy-agent-kit, cluster: envoy-agent-kit }
admin:
  address:
{{- if .AdminSocket}}
    pipe: { path: "{{.AdminSocket}}", mode: 0600 }
{{- else}}
    socket_address: { address: {{.AdminAddress}}, port_value: {{.Admin}} }
{{- end}}
{{- if .InitDelay}}
dynamic_resources:
  cds_config:
    resource_api_version: V3
    initial_fetch_timeout: {{.InitDelaySeconds}}s
    api_config_source:
      api_type: GRPC
      transport_api_version: V3
      grpc_services:
      - envoy_grpc: { cluster_name: xds }
{{- end}}
static_resources:
  listeners:
{{- range $i, $l := .Listeners}}
  - name: ingress{{if $i}}_{{$i}}{{end}}
    address:
      socket_address: { address: 127.0.0.1, port_value: {{$l.Port}} }
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress{{if $i}}_{{$i}}{{end}}
          {{- if $.AccessLog}}
          access_log:
          - name: envoy.access_loggers.file
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
              path: "{{$.AccessLog}}"
              log_format: { text_format_source: { inline_string: "%REQ(:PATH)%\n" } }
          {{- end}}
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              {{- if $l.Header}}
              response_headers_to_add:
              - header: { key: x-config-version, value: "{{$l.Header}}" }
              {{- end}}
              routes:
              - match: { prefix: "/" }
                route: { cluster: upstream, timeout: 0s }
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
{{- end}}
  clusters:
  - name: upstream
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: upstream
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: { address: 127.0.0.1, port_value: {{.Upstream}} }
{{- if .InitDelay}}
  - name: xds
    type: STATIC
    connect_timeout: 0.25s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: { http2_protocol_options: {} }
    load_assignment:
      cluster_name: xds
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: { address: 127.0.0.1, port_value: 1 }
{{- end}}
`))

// RenderBootstrap returns the bootstrap YAML for o.
func RenderBootstrap(o BootstrapOptions) ([]byte, error) {
	if o.AdminAddress == "" {
		o.AdminAddress = "127.0.0.1"
	}
	type listener struct {
		Port   int
		Header string
	}
	listeners := []listener{{o.Listener, o.ResponseHeader}}
	for _, port := range o.ExtraListeners {
		listeners = append(listeners, listener{port, cmp.Or(o.ExtraResponseHeader, o.ResponseHeader)})
	}
	data := struct {
		BootstrapOptions
		InitDelaySeconds float64
		Listeners        []listener
	}{o, o.InitDelay.Seconds(), listeners}
	var b bytes.Buffer
	if err := bootstrapTmpl.Execute(&b, data); err != nil {
		return nil, fmt.Errorf("bootstrap template: %w", err)
	}
	return b.Bytes(), nil
}

// WriteBootstrap writes a bootstrap to dir/name and returns its path
// (writeBootstrap); it fails the test on an error.
func WriteBootstrap(t testing.TB, dir, name string, o BootstrapOptions) string {
	t.Helper()
	p, err := writeBootstrap(dir, name, o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// writeBootstrap writes the bootstrap for o to dir/name, atomically (a
// rename: an agent reloading meanwhile never reads half a file), and
// returns its path.
func writeBootstrap(dir, name string, o BootstrapOptions) (string, error) {
	b, err := RenderBootstrap(o)
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, name)
	return p, WriteFileAtomic(p, b)
}

// WriteFileAtomic writes data to path through a temporary file in the same
// folder and a rename, mode 0644.
func WriteFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(f.Name())
	_, werr := f.Write(data)
	cerr := f.Chmod(0o644)
	if err := f.Close(); werr != nil || cerr != nil || err != nil {
		return fmt.Errorf("write %s: %w", path, firstErr(werr, cerr, err))
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// TLSBootstrap is a bootstrap with one TLS listener ("tls") on port that
// answers every request with 200 "ok", its certificate and key named by
// file (tls_certificates), and the admin API on TCP port admin.
func TLSBootstrap(certFile, keyFile string, port, admin int) []byte {
	return []byte(fmt.Sprintf(`admin:
  address: {socket_address: {address: 127.0.0.1, port_value: %d}}
static_resources:
  listeners:
  - name: tls
    address: {socket_address: {address: 127.0.0.1, port_value: %d}}
    filter_chains:
    - transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
          common_tls_context:
            tls_certificates:
            - certificate_chain: {filename: %q}
              private_key: {filename: %q}
      filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: tls
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {prefix: "/"}
                direct_response: {status: 200, body: {inline_string: ok}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
`, admin, port, certFile, keyFile))
}

// ExampleOptions shape a bootstrap written the way Envoy's own examples
// (the envoyproxy/examples sandboxes) are: no node, listeners without
// names on every address, the admin on TCP or absent.
type ExampleOptions struct {
	// Listener is the port of a listener that routes everything to the
	// cluster "service" on 127.0.0.1:Upstream.
	Listener, Upstream int
	// Admin is the admin's TCP address, such as "0.0.0.0:9901"; "" leaves
	// the bootstrap without an admin.
	Admin string
	// StatsListener, when set, is the port of a listener that serves
	// /stats/prometheus through the cluster "envoy-stats", which reaches
	// the admin's own port on 127.0.0.1 (as the brotli, gzip, zstd and
	// local_ratelimit examples expose Envoy's statistics).
	StatsListener int
	// ResponseHeader, when set, is added to every proxied response as
	// x-config-version.
	ResponseHeader string
}

var exampleTmpl = template.Must(template.New("example").Parse(`static_resources:
  listeners:
  - address:
      socket_address: { address: 0.0.0.0, port_value: {{.Listener}} }
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress_http
          codec_type: AUTO
          route_config:
            name: local_route
            virtual_hosts:
            - name: backend
              domains: ["*"]
              {{- if .ResponseHeader}}
              response_headers_to_add:
              - header: { key: x-config-version, value: "{{.ResponseHeader}}" }
              {{- end}}
              routes:
              - match: { prefix: "/" }
                route: { cluster: service }
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
{{- if .StatsListener}}
  - address:
      socket_address: { address: 0.0.0.0, port_value: {{.StatsListener}} }
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: stats_server
          route_config:
            virtual_hosts:
            - name: admin_interface
              domains: ["*"]
              routes:
              - match: { prefix: "/stats/prometheus" }
                route: { cluster: envoy-stats }
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
{{- end}}
  clusters:
  - name: service
    type: STRICT_DNS
    lb_policy: ROUND_ROBIN
    load_assignment:
      cluster_name: service
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: { address: 127.0.0.1, port_value: {{.Upstream}} }
{{- if .StatsListener}}
  - name: envoy-stats
    connect_timeout: 0.25s
    type: STATIC
    load_assignment:
      cluster_name: envoy-stats
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: { address: 127.0.0.1, port_value: {{.AdminPort}} }
{{- end}}
{{- if .Admin}}
admin:
  address:
    socket_address: { address: {{.AdminHost}}, port_value: {{.AdminPort}} }
{{- end}}
`))

// ExampleBootstrap returns the bootstrap YAML for o.
func ExampleBootstrap(o ExampleOptions) ([]byte, error) {
	data := struct {
		ExampleOptions
		AdminHost, AdminPort string
	}{ExampleOptions: o}
	if o.Admin != "" {
		host, port, err := net.SplitHostPort(o.Admin)
		if err != nil {
			return nil, fmt.Errorf("example bootstrap: admin %q: %w", o.Admin, err)
		}
		data.AdminHost, data.AdminPort = host, port
	} else if o.StatsListener != 0 {
		return nil, errors.New("example bootstrap: a stats listener needs an admin")
	}
	var b bytes.Buffer
	if err := exampleTmpl.Execute(&b, data); err != nil {
		return nil, fmt.Errorf("example bootstrap template: %w", err)
	}
	return b.Bytes(), nil
}
