package xds

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// refusals are resources Convert refuses. envoyRefuses says Envoy refuses
// them too (TestEnvoyRefusesToo checks it); the others Envoy reads in a way
// the agent does not follow (the last of two keys), so the caller takes
// another path.
var refusals = []struct {
	name, yaml, want string
	envoyRefuses     bool
}{
	{"number for a string", `{name: 123, virtual_hosts: []}`, "Envoy reads 123 as a number", true},
	{"bool for a string", `{name: r, virtual_hosts: [{name: yes, domains: ["*"]}]}`, "Envoy reads true as a bool", true},
	{"explicit tag", `{name: !!str 123}`, "explicit tag", true},
	{"unknown field", `{name: r, virtual_hostz: []}`, `no field "virtual_hostz"`, true},
	{"unknown type", `{name: r, typed_per_filter_config: {x: {"@type": type.googleapis.com/no.Such}}}`, "unknown type", true},
	{"not a duration", `{name: r, virtual_hosts: [{name: v, domains: ["*"], routes: [{match: {prefix: /}, route: {cluster: c, timeout: 5}}]}]}`, "want a string", true},
	{"unknown enum", `{name: r, virtual_hosts: [{name: v, domains: ["*"], require_tls: sometimes}]}`, "no value", true},
	{"float for an integer", `{name: r, virtual_hosts: [{name: v, domains: ["*"], routes: [{match: {prefix: /}, direct_response: {status: 200.5}}]}]}`, "want an integer", true},
	{"bool not true or false", `{name: r, validate_clusters: "maybe"}`, "want true or false", true},
	{"two keys", "name: r\nname: s\n", "given twice", false},
	{"anchor", "name: &a r\nvirtual_hosts: []\n", "anchors", false},
	{"wrong @type", "{\"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster, name: r}", "@type is", false},
	{"not a mapping", `[1, 2]`, "not a mapping", false},
	{"no name", `{virtual_hosts: []}`, "no name", false},
}

func TestConvertRefuses(t *testing.T) {
	for _, c := range refusals {
		t.Run(c.name, func(t *testing.T) {
			var doc yaml.Node // not through bootyaml, which refuses two keys first
			if err := yaml.Unmarshal([]byte(c.yaml), &doc); err != nil {
				t.Fatal(err)
			}
			_, err := Convert(RouteType, &doc)
			var ce *ConvertError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want a *ConvertError with %q", err, c.want)
			}
		})
	}
}

// TestEnvoyRefusesToo: what Convert refuses as wrong, Envoy refuses too
// (envoy --mode validate with the route configuration inline).
func TestEnvoyRefusesToo(t *testing.T) {
	if envoykit.UnitTier() {
		t.Skip("runs Envoy")
	}
	for _, c := range refusals {
		if !c.envoyRefuses {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "b.yaml")
			b := fmt.Sprintf("static_resources:\n  clusters: [{name: c, type: STATIC, load_assignment: {cluster_name: c, endpoints: []}}]\n  listeners:\n  - {name: l0, address: {socket_address: {address: 127.0.0.1, port_value: 1}}, filter_chains: [{filters: [{name: hcm, typed_config: {\"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager, stat_prefix: l0, %s, route_config: %s}}]}]}\n", router, c.yaml)
			if err := os.WriteFile(path, []byte(b), 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := runValidate(t, path); err == nil {
				t.Fatalf("Envoy took it:\n%s", out)
			}
		})
	}
}

// TestConvertDeterministic: the same resource, its keys in another order
// or its names in JSON's spelling, gives the same bytes.
func TestConvertDeterministic(t *testing.T) {
	a, err := ConvertYAML(RouteType, []byte(routeCorpus[1]))
	if err != nil {
		t.Fatal(err)
	}
	b, err := ConvertYAML(RouteType, []byte(routeCorpus[1]))
	if err != nil {
		t.Fatal(err)
	}
	c, err := ConvertYAML(RouteType, []byte(`{virtualHosts: [{domains: ["*"], name: v}], name: r}`))
	if err != nil {
		t.Fatal(err)
	}
	d, err := ConvertYAML(RouteType, []byte(`{name: r, virtual_hosts: [{name: v, domains: ["*"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Body, b.Body) || a.Sum != b.Sum || !bytes.Equal(c.Body, d.Body) || a.Name != "r2" {
		t.Fatal("not deterministic")
	}
}

// TestConvertHostile feeds Convert hostile input in a child process under a
// memory limit: each is refused with an error, within bounded memory.
func TestConvertHostile(t *testing.T) {
	child, used := envoykit.UnderMemoryLimit(t, 1<<30)
	if !child {
		t.Logf("child's peak RSS %d MB, CPU %v", used.MaxRSS>>20, used.CPU)
		return
	}
	deep := strings.Repeat("{virtual_hosts: [", 5000) + strings.Repeat("]}", 5000)
	bomb := "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
	for i := range 9 {
		bomb += fmt.Sprintf("%c: &%c [*%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c]\n", 'b'+i, 'b'+i, 'a'+i, 'a'+i, 'a'+i, 'a'+i, 'a'+i, 'a'+i, 'a'+i, 'a'+i, 'a'+i, 'a'+i)
	}
	wide := "name: r\nmetadata: {filter_metadata: {m: {" + strings.Repeat("k: 1, ", 1) + "}}}\nvirtual_hosts: [" + strings.Repeat("{name: v, domains: [a]},", 5000) + "]\n"
	nested := "name: r\nmetadata: {filter_metadata: {m: " + strings.Repeat("[", 300) + strings.Repeat("]", 300) + "}}\n"
	for name, in := range map[string]string{"deep": deep, "alias bomb": bomb, "nested struct": nested, "huge": strings.Repeat("x", 5<<20)} {
		if _, err := ConvertYAML(RouteType, []byte(in)); err == nil {
			t.Errorf("%s: converted", name)
		}
	}
	if _, err := ConvertYAML(RouteType, []byte(wide)); err != nil {
		t.Errorf("5,000 virtual hosts: %v", err)
	}
}
