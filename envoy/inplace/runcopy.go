// The running copy's own edits (step 2 of the pipeline, doc.go): the admin
// the agent reaches Envoy through, and the node that Envoy's file
// subscriptions need.

package inplace

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
)

// DefaultNode is the node id and cluster the running copy gets where the
// operator's bootstrap leaves them empty: Envoy refuses a subscription to
// resources from files without both (LDS and CDS: "node 'id' and 'cluster'
// are required"; a secret: "TlsCertificateSdsApi: node 'id' and 'cluster'
// are required", Envoy 1.40.0). A --service-node or --service-cluster
// argument still wins.
const DefaultNode = "envoy-agent"

// AgentAdmin is where the agent reaches Envoy's admin API, and so where
// the running copy's admin must be: a unix socket, or a TCP port. Zero, the
// copy's admin is left as it is.
type AgentAdmin struct {
	Socket string // the unix socket's path; "" for TCP
	Host   string // TCP: the address (the agent's localhost)
	Port   int    // TCP: the port
}

// adminSocketMode is the admin socket's mode in the running copy: the
// agent's user alone can connect (the admin API can stop Envoy and dump
// its configuration, secrets included). Octal, as operators write it and
// as Envoy (and the agent's check of the bootstrap) read it.
const adminSocketMode = "0600"

// Edits is what RunningCopy changed in the operator's bootstrap.
type Edits struct {
	// AdminAdded: the bootstrap has no admin address, and the copy the
	// agent's (Envoy starts no admin API without one).
	AdminAdded bool
	// AdminMoved is the bootstrap's TCP admin address ("0.0.0.0:9901")
	// when the copy puts the admin on the agent's socket instead; "" when
	// it did not.
	AdminMoved string
	// AdminClusters are the static clusters whose endpoints reached that
	// TCP address, which reach the admin's socket instead (a listener that
	// serves /stats/prometheus through a cluster to Envoy's own admin).
	AdminClusters []string
	// NodeSet lists what the copy filled in of an empty node ("node.id",
	// "node.cluster").
	NodeSet []string
	// UserAgents counts the connection managers with add_user_agent when
	// the bootstrap's node is empty: they send the node Envoy runs with
	// upstream (x-envoy-downstream-service-cluster and -node), which a
	// bare Envoy of the same bootstrap sends empty (cluster) or not at all
	// (node). The copy then leaves the node empty (NodeSet is empty), so
	// that Envoy sends what a bare one sends, and runs as it is (Envoy
	// reads resources from files and over ADS only with a node), unless
	// the agent serves it secrets, which need the node filled.
	UserAgents int
}

// Empty reports that the copy is the operator's bootstrap.
func (e Edits) Empty() bool {
	return !e.AdminAdded && e.AdminMoved == "" && len(e.AdminClusters) == 0 && len(e.NodeSet) == 0
}

// AdminClusterError is a bootstrap whose cluster reaches its TCP admin
// beside other endpoints found by DNS: such a cluster cannot reach a unix
// socket (Envoy takes pipe addresses in STATIC clusters only).
type AdminClusterError struct {
	Cluster    string // the cluster's name
	Host, Port string // the bootstrap's admin address
}

func (e *AdminClusterError) Error() string {
	return fmt.Sprintf("cluster %s reaches Envoy's admin at %s beside endpoints it resolves by DNS, and the agent runs the admin on a unix socket, which such a cluster cannot reach", e.Cluster, hostPort(e.Host, e.Port))
}

// RunningCopy returns the bootstrap data (a file called name) as the agent
// runs it, and what it changed: its admin is where the agent reaches it
// (admin, below), and node.id and node.cluster are DefaultNode where the
// operator left them empty. Everything else keeps its meaning; data that
// needs none of this comes back as it is, and so does a copy rewritten
// already. A .pb or .pb_text bootstrap, or one that does not parse (Envoy's
// validation says why), is returned as it is.
//
// The admin: a bootstrap without an admin address gets the agent's. A
// bootstrap whose admin is on TCP while the agent's is a unix socket gets
// the socket, and each static cluster endpoint that reached the TCP address
// (that address, or loopback when it is loopback or any address) reaches
// the socket instead, so that a listener serving Envoy's statistics through
// such a cluster answers as before. Any other admin is the operator's,
// which the configuration's checks hold to the agent's.
func RunningCopy(data []byte, name string, admin AgentAdmin) ([]byte, Edits, error) {
	if !bootyaml.Rewritable(name) {
		return data, Edits{}, nil
	}
	var doc yaml.Node
	if err := bootyaml.Decode(data, &doc); err != nil {
		if le := (*bootyaml.LimitError)(nil); errors.As(err, &le) {
			return nil, Edits{}, fmt.Errorf("%s: %w", name, le)
		}
		return data, Edits{}, nil
	}
	edits, err := EditRunningCopy(&doc, admin, false)
	if err != nil || edits.Empty() {
		return data, edits, err
	}
	out, err := bootyaml.Encode(&doc, name)
	return out, edits, err
}

// EditRunningCopy makes RunningCopy's edits in the decoded bootstrap doc
// (for a caller that decoded it already, once for its own reading too).
// servesSecrets says the copy reads secrets from the agent's ADS server
// (the certificates' step moved some), which needs the node filled in
// whatever the connection managers send.
func EditRunningCopy(doc *yaml.Node, admin AgentAdmin, servesSecrets bool) (Edits, error) {
	var edits Edits
	root := bootyaml.Root(doc)
	if root == nil {
		return edits, nil
	}
	if admin != (AgentAdmin{}) {
		if err := moveAdmin(root, admin, &edits); err != nil {
			return edits, err
		}
	}
	if nodeEmpty(root) {
		edits.UserAgents = countUserAgents(root)
	}
	if edits.UserAgents == 0 || servesSecrets {
		edits.NodeSet = fillNode(root)
	}
	return edits, nil
}

// countUserAgents counts the mappings under n whose add_user_agent is
// true, as Envoy's YAML reads a bool.
func countUserAgents(n *yaml.Node) int {
	count := 0
	if n.Kind == yaml.MappingNode {
		if v := bootyaml.Value(n, "add_user_agent"); v != nil && v.Kind == yaml.ScalarNode {
			switch strings.ToLower(v.Value) {
			case "true", "y", "yes", "on":
				count++
			}
		}
	}
	for _, c := range n.Content {
		count += countUserAgents(c)
	}
	return count
}

// moveAdmin puts the admin of the bootstrap root where the agent reaches
// it, when it has none or has one on TCP while the agent's is a socket.
func moveAdmin(root *yaml.Node, agent AgentAdmin, edits *Edits) error {
	adm := bootyaml.Value(root, "admin")
	addr := bootyaml.Value(adm, "address")
	sa := bootyaml.Value(addr, "socket_address")
	switch {
	case addr == nil || addr.Kind != yaml.MappingNode || len(addr.Content) == 0:
		if adm == nil || adm.Kind != yaml.MappingNode {
			adm = bootyaml.Mapping()
			bootyaml.Set(root, "admin", adm)
		}
		bootyaml.Set(adm, "address", agentAddress(agent))
		edits.AdminAdded = true
		return nil
	case agent.Socket == "" || sa == nil:
		return nil // a pipe, or TCP kept: the configuration's checks hold it to the agent's
	}
	host, port := bootyaml.Text(bootyaml.Value(sa, "address")), bootyaml.Text(bootyaml.Value(sa, "port_value"))
	edits.AdminMoved = hostPort(host, port)
	bootyaml.Set(adm, "address", agentAddress(agent))
	for i, c := range bootyaml.Items(bootyaml.Value(bootyaml.Value(root, "static_resources"), "clusters")) {
		reached, err := reachAdminBySocket(c, host, port, agent.Socket)
		if err != nil {
			return fmt.Errorf("static_resources.clusters[%d]: %w", i, err)
		}
		if reached {
			edits.AdminClusters = append(edits.AdminClusters, bootyaml.Text(bootyaml.Value(c, "name")))
		}
	}
	return nil
}

func agentAddress(agent AgentAdmin) *yaml.Node {
	if agent.Socket != "" {
		mode := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: adminSocketMode}
		return bootyaml.Mapping("pipe", bootyaml.Mapping("path", bootyaml.Str(agent.Socket), "mode", mode))
	}
	return bootyaml.Mapping("socket_address", bootyaml.Mapping("address", bootyaml.Str(agent.Host), "port_value", bootyaml.Int(agent.Port)))
}

func hostPort(host, port string) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}

// reachAdminBySocket points the endpoints of cluster c that reach the
// admin at host:port to the socket instead, and reports whether it did. A
// cluster whose type resolves by DNS changes to STATIC when all its
// endpoints reach the admin; with others beside them, it is an
// *AdminClusterError.
func reachAdminBySocket(c *yaml.Node, host, port, socket string) (bool, error) {
	var hit, other int
	var addrs []*yaml.Node
	for _, loc := range bootyaml.Items(bootyaml.Value(bootyaml.Value(c, "load_assignment"), "endpoints")) {
		for _, lb := range bootyaml.Items(bootyaml.Value(loc, "lb_endpoints")) {
			a := bootyaml.Value(bootyaml.Value(lb, "endpoint"), "address")
			sa := bootyaml.Value(a, "socket_address")
			if sa == nil {
				other++
				continue
			}
			if !reachesAdmin(bootyaml.Text(bootyaml.Value(sa, "address")), bootyaml.Text(bootyaml.Value(sa, "port_value")), host, port) {
				other++
				continue
			}
			hit++
			addrs = append(addrs, a)
		}
	}
	if hit == 0 {
		return false, nil
	}
	typ := bootyaml.Value(c, "type")
	if dns := strings.HasSuffix(strings.ToUpper(bootyaml.Text(typ)), "_DNS"); dns {
		if other > 0 {
			return false, &AdminClusterError{Cluster: bootyaml.Text(bootyaml.Value(c, "name")), Host: host, Port: port}
		}
		bootyaml.Set(c, "type", bootyaml.Str("STATIC"))
	}
	for _, a := range addrs {
		a.Content = []*yaml.Node{bootyaml.Key("pipe"), bootyaml.Mapping("path", bootyaml.Str(socket))}
	}
	return true, nil
}

// reachesAdmin reports whether a connection to host:port reaches an admin
// bound to admin:adminPort: the same address, or this host's loopback or
// any address (which Linux connects to this host) when the admin is bound
// to loopback or to any address.
func reachesAdmin(host, port, admin, adminPort string) bool {
	if p, err := strconv.Atoi(port); err != nil || p == 0 || port != adminPort {
		return false
	}
	if host == admin {
		return true
	}
	local := func(h string) bool {
		if h == "localhost" {
			return true
		}
		ip, err := netip.ParseAddr(h)
		return err == nil && (ip.IsLoopback() || ip.IsUnspecified())
	}
	return local(host) && local(admin)
}

// HasNode reports whether the bootstrap root sets node.id and
// node.cluster: what Envoy needs to read resources from files or over ADS.
func HasNode(root *yaml.Node) bool { return !nodeEmpty(root) }

// nodeEmpty reports whether the bootstrap root leaves node.id or
// node.cluster empty.
func nodeEmpty(root *yaml.Node) bool {
	node := bootyaml.Value(root, "node")
	return !nodeField(node, "id") || !nodeField(node, "cluster")
}

// nodeField reports whether the node mapping sets field k to a string
// that is not empty.
func nodeField(node *yaml.Node, k string) bool {
	v := bootyaml.Value(node, k)
	return v != nil && v.Kind == yaml.ScalarNode && v.Value != "" && v.Tag != "!!null"
}

// fillNode sets node.id and node.cluster of the bootstrap root to
// DefaultNode where they are missing or empty, and says which it set.
func fillNode(root *yaml.Node) []string {
	node := bootyaml.Value(root, "node")
	if node == nil || node.Kind != yaml.MappingNode {
		bootyaml.Del(root, "node") // node: ~, or nothing
		node = bootyaml.Mapping()
		root.Content = append([]*yaml.Node{bootyaml.Key("node"), node}, root.Content...)
	}
	var set []string
	for _, k := range []string{"id", "cluster"} {
		if nodeField(node, k) {
			continue
		}
		bootyaml.Set(node, k, bootyaml.Str(DefaultNode))
		set = append(set, "node."+k)
	}
	return set
}
