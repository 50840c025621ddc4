package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"text/template"
)

// bootstrap is what a bench Envoy runs: HTTP listeners on 127.0.0.1 that
// route everything to the upstream and add x-config-version to responses.
type bootstrap struct {
	AdminPort     int
	ListenerPorts []int
	UpstreamPort  int
	Version       string // the x-config-version response header
}

var bootstrapTmpl = template.Must(template.New("bootstrap").Parse(`node: { id: envoy-agent-bench, cluster: envoy-agent-bench }
admin:
  address:
    socket_address: { address: 127.0.0.1, port_value: {{.AdminPort}} }
static_resources:
  listeners:
{{- range $i, $port := .ListenerPorts}}
  - name: listener_{{$i}}
    address:
      socket_address: { address: 127.0.0.1, port_value: {{$port}} }
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress_{{$i}}
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              response_headers_to_add:
              - header: { key: x-config-version, value: "{{$.Version}}" }
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
              socket_address: { address: 127.0.0.1, port_value: {{.UpstreamPort}} }
`))

// write renders the bootstrap to path atomically (a rename), so a reload
// never reads half a file.
func (b bootstrap) write(path string) error {
	var buf bytes.Buffer
	if err := bootstrapTmpl.Execute(&buf, b); err != nil {
		return fmt.Errorf("bootstrap template: %w", err)
	}
	return writeAtomic(path, buf.Bytes())
}

func writeAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
