package inplace

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
)

// statsThroughAdmin is a bootstrap written the way Envoy's own examples
// expose Envoy's statistics: the admin on TCP 0.0.0.0:9901, and a
// listener routing /stats/prometheus through a cluster to that address.
const statsThroughAdmin = `admin:
  address: { socket_address: { address: 0.0.0.0, port_value: 9901 } }
static_resources:
  clusters:
  - name: envoy-stats
    type: STATIC
    load_assignment:
      cluster_name: envoy-stats
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 9901 } } } }] }]
  - name: by-dns
    type: STRICT_DNS
    load_assignment:
      cluster_name: by-dns
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: localhost, port_value: 9901 } } } }] }]
  - name: service
    type: STRICT_DNS
    load_assignment:
      cluster_name: service
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: service, port_value: 8080 } } } }] }]
`

func TestRunningCopy(t *testing.T) {
	const sock = "/run/envoy-agent/admin.sock"
	socket := AgentAdmin{Socket: sock}
	tcp := AgentAdmin{Host: "127.0.0.1", Port: 15000}
	node := "node: { id: n1, cluster: c }\n"
	for _, tt := range []struct {
		name     string
		file     string
		text     string
		admin    AgentAdmin
		edits    Edits
		contains []string
		absent   []string
	}{
		{name: "no admin: the agent's socket", text: node + "static_resources: {}\n", admin: socket,
			edits: Edits{AdminAdded: true}, contains: []string{`"pipe": {"path": "` + sock + `", "mode": 384}`}},
		{name: "no admin: the agent's TCP port", text: node, admin: tcp,
			edits: Edits{AdminAdded: true}, contains: []string{`"socket_address": {"address": "127.0.0.1", "port_value": 15000}`}},
		{name: "an admin without an address keeps the rest", text: node + "admin: { access_log_path: /dev/null }\n", admin: socket,
			edits: Edits{AdminAdded: true}, contains: []string{`"access_log_path": "/dev/null"`, sock}},
		{name: "TCP admin, socket agent: moved, clusters to the socket", text: node + statsThroughAdmin, admin: socket,
			edits:    Edits{AdminMoved: "0.0.0.0:9901", AdminClusters: []string{"envoy-stats", "by-dns"}},
			contains: []string{`"address": {"socket_address": {"address": "service", "port_value": 8080}}`, `"type": "STATIC"`},
			absent:   []string{"9901", `"type": "STRICT_DNS", "load_assignment": {"cluster_name": "by-dns"`}},
		{name: "TCP admin, TCP agent: the operator's", text: node + statsThroughAdmin, admin: tcp},
		{name: "pipe admin: the operator's", text: node + "admin: { address: { pipe: { path: /elsewhere.sock } } }\n", admin: socket},
		{name: "no node", text: "admin: { address: { pipe: { path: " + sock + " } } }\n", admin: socket,
			edits: Edits{NodeSet: []string{"node.id", "node.cluster"}}, contains: []string{`"node": {`, `"id": "envoy-agent",`, `"cluster": "envoy-agent"`}},
		{name: "no node, connection managers with add_user_agent", text: "admin: { address: { pipe: { path: " + sock + " } } }\nstatic_resources: { listeners: [{ filter_chains: [{ filters: [{ typed_config: { add_user_agent: true } }, { typed_config: { add_user_agent: yes } }, { typed_config: { add_user_agent: false } }] }] }] }\n", admin: socket,
			edits: Edits{UserAgents: 2}, absent: []string{"node"}},
		{name: "node set, add_user_agent: its own node", text: node + "admin: { address: { pipe: { path: " + sock + " } } }\nstatic_resources: { listeners: [{ filter_chains: [{ filters: [{ typed_config: { add_user_agent: true } }] }] }] }\n", admin: socket},
		{name: "empty node cluster", text: "node: { id: n1, cluster: \"\" }\nadmin: { address: { pipe: { path: " + sock + " } } }\n", admin: socket,
			edits: Edits{NodeSet: []string{"node.cluster"}}, contains: []string{`"id": "n1"`}},
		{name: "JSON", file: "e.json", text: `{"node":{"id":"n1","cluster":"c"}}`, admin: socket,
			edits: Edits{AdminAdded: true}, contains: []string{`"admin":{"address":{"pipe":{"mode":384,"path":"` + sock + `"}}}`}},
		{name: "no admin configured: left as it is", text: node + "static_resources: {}\n"},
		{name: "protobuf: as it is", file: "e.pb", text: "\x0a\x01x", admin: socket},
		{name: "not YAML: as it is", text: "{", admin: socket},
	} {
		t.Run(tt.name, func(t *testing.T) {
			file := tt.file
			if file == "" {
				file = "envoy.yaml"
			}
			out, edits, err := RunningCopy([]byte(tt.text), file, tt.admin)
			if err != nil {
				t.Fatal(err)
			}
			if !equalEdits(edits, tt.edits) {
				t.Errorf("edits %+v, want %+v", edits, tt.edits)
			}
			if tt.edits.Empty() && string(out) != tt.text {
				t.Errorf("changed with nothing to change:\n%s", out)
			}
			for _, s := range tt.contains {
				if !strings.Contains(string(out), s) {
					t.Errorf("the copy lacks %q:\n%s", s, out)
				}
			}
			for _, s := range tt.absent {
				if strings.Contains(string(out), s) {
					t.Errorf("the copy holds %q:\n%s", s, out)
				}
			}
			if tt.edits.Empty() {
				return
			}
			var v any
			if err := yaml.Unmarshal(out, &v); err != nil {
				t.Errorf("the copy does not parse: %v", err)
			}
			// A copy is made again from a copy (a failed hot restart's
			// put-back): nothing changes.
			again, edits, err := RunningCopy(out, file, tt.admin)
			if err != nil || string(again) != string(out) || !edits.Empty() {
				t.Errorf("the copy of the copy: %+v %v\n%s", edits, err, again)
			}
		})
	}
}

// A bootstrap with no node whose connection managers set add_user_agent
// keeps its empty node, as a bare Envoy runs it, unless the agent serves
// it secrets over ADS, which needs one.
func TestUserAgentsKeepAnEmptyNode(t *testing.T) {
	const text = "static_resources: { listeners: [{ filter_chains: [{ filters: [{ typed_config: { add_user_agent: true } }] }] }] }\n"
	for _, tt := range []struct {
		name          string
		servesSecrets bool
		want          Edits
		hasNode       bool
	}{
		{"no secrets: left empty", false, Edits{UserAgents: 1}, false},
		{"secrets over ADS: filled", true, Edits{NodeSet: []string{"node.id", "node.cluster"}, UserAgents: 1}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var doc yaml.Node
			if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
				t.Fatal(err)
			}
			edits, err := EditRunningCopy(&doc, AgentAdmin{}, tt.servesSecrets)
			if err != nil {
				t.Fatal(err)
			}
			if !equalEdits(edits, tt.want) {
				t.Errorf("edits %+v, want %+v", edits, tt.want)
			}
			if got := HasNode(bootyaml.Root(&doc)); got != tt.hasNode {
				t.Errorf("HasNode = %v, want %v", got, tt.hasNode)
			}
		})
	}
}

func equalEdits(a, b Edits) bool {
	return a.AdminAdded == b.AdminAdded && a.AdminMoved == b.AdminMoved && slices.Equal(a.AdminClusters, b.AdminClusters) && slices.Equal(a.NodeSet, b.NodeSet) && a.UserAgents == b.UserAgents
}

// TestRunningCopyRefusesADNSClusterMixedWithTheAdmin: a cluster that
// resolves by DNS cannot reach a unix socket, so one that reaches the TCP
// admin beside other endpoints cannot follow it there.
func TestRunningCopyRefusesADNSClusterMixedWithTheAdmin(t *testing.T) {
	text := `admin: { address: { socket_address: { address: 127.0.0.1, port_value: 9901 } } }
static_resources:
  clusters:
  - name: mixed
    type: LOGICAL_DNS
    load_assignment:
      cluster_name: mixed
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: localhost, port_value: 9901 } } } }, { endpoint: { address: { socket_address: { address: other, port_value: 80 } } } }] }]
`
	_, _, err := RunningCopy([]byte(text), "envoy.yaml", AgentAdmin{Socket: "/run/a.sock"})
	var ace *AdminClusterError
	if !errors.As(err, &ace) || ace.Cluster != "mixed" || ace.Host != "127.0.0.1" || ace.Port != "9901" || !strings.Contains(err.Error(), "static_resources.clusters[0]") {
		t.Fatalf("RunningCopy = %v; want an AdminClusterError for mixed at 127.0.0.1:9901", err)
	}
}

func TestReachesAdmin(t *testing.T) {
	for _, tt := range []struct {
		host, port, admin string
		want              bool
	}{
		{"127.0.0.1", "9901", "0.0.0.0", true},
		{"0.0.0.0", "9901", "0.0.0.0", true},
		{"localhost", "9901", "127.0.0.1", true},
		{"::1", "9901", "::", true},
		{"10.0.0.5", "9901", "10.0.0.5", true},
		{"10.0.0.5", "9901", "0.0.0.0", false}, // maybe this host's, maybe not: left as it is
		{"127.0.0.1", "9901", "10.0.0.5", false},
		{"127.0.0.1", "9902", "0.0.0.0", false},
		{"service", "9901", "0.0.0.0", false},
	} {
		if got := reachesAdmin(tt.host, tt.port, tt.admin, "9901"); got != tt.want {
			t.Errorf("reachesAdmin(%s:%s, admin %s:9901) = %v", tt.host, tt.port, tt.admin, got)
		}
	}
}
