// Package inplace runs an operator's static bootstrap with its listeners,
// their routes, its clusters and its static secrets as filesystem xDS
// resources (dynamic_resources with a path_config_source for LDS and CDS,
// an RDS source in each HTTP connection manager instead of its inline
// route_config, an SDS source in each reference to a static secret; files
// in a folder of the agent's), so that a reload can
// change them in the Envoy that serves instead of starting a new one; a
// change of routes alone drains no connection. It splits a bootstrap into the part Envoy reads at
// start and the resources it can read again (Parse, Write), compares two
// bootstraps (Compare) and applies the difference to a running Envoy
// through its files and admin API (Apply).
//
// A bootstrap is run as it is (Parse returns a *NotRewritableError) when it
// already has dynamic_resources, is not YAML or JSON, uses YAML anchors or
// aliases, or has a listener without a name. Clusters that something
// outside the listeners and clusters names (a stats sink, a tracer, an xDS
// or gRPC service's cluster_name) stay static: a change to them is a
// change to the bootstrap itself.
package inplace

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
)

// The files of one epoch's resource folder.
const (
	ListenersFile = "lds.yaml"
	ClustersFile  = "cds.yaml"
	BootstrapFile = "bootstrap.yaml"
	// DefaultNode is the node id and cluster given to a bootstrap that sets
	// none: Envoy refuses an xDS subscription, files included, without them.
	DefaultNode = "envoy-agent"

	listenerType = "type.googleapis.com/envoy.config.listener.v3.Listener"
	clusterType  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
)

// NotRewritableError says why a bootstrap runs as the operator wrote it,
// and so why every change to it is a hot restart.
type NotRewritableError struct{ Reason string }

func (e *NotRewritableError) Error() string { return "the bootstrap runs as it is: " + e.Reason }

func notRewritable(format string, args ...any) error {
	return &NotRewritableError{Reason: fmt.Sprintf(format, args...)}
}

// resource is one listener, route configuration or cluster: its name, its
// YAML and that YAML's digest, which two bootstraps compare.
type resource struct {
	name string
	node *yaml.Node
	sum  [sha256.Size]byte // digest(node)
}

// digest is what two resources compare, and what a file's version is made
// of: the tree's kinds, tags, quoting styles and values, each length
// prefixed, without comments or positions. Encoding each resource to YAML
// for the comparison took half of parsing a bootstrap of 1,000 listeners
// (60 of 120 ms).
func digest(n *yaml.Node) [sha256.Size]byte {
	h := sha256.New()
	var buf [binary.MaxVarintLen64]byte
	put := func(s string) {
		h.Write(buf[:binary.PutUvarint(buf[:], uint64(len(s)))])
		h.Write([]byte(s))
	}
	var walk func(*yaml.Node)
	walk = func(n *yaml.Node) {
		h.Write([]byte{byte(n.Kind), byte(n.Style)})
		put(n.Tag)
		put(n.Value)
		h.Write(buf[:binary.PutUvarint(buf[:], uint64(len(n.Content)))])
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(n)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// Bootstrap is an operator's bootstrap split into what Envoy reads at start
// (rest) and the listeners and clusters it can read again.
type Bootstrap struct {
	rest      *yaml.Node // the top-level mapping without the moved resources
	restText  string
	listeners []resource
	routes    []resource        // the connection managers' route configurations (routes.go)
	prefixes  map[string]string // their connection managers' stat prefixes, by route name
	clusters  []resource
	secrets   []resource // the static secrets moved to SDS files (secrets.go)
	kept      []string   // clusters that stay static, named from outside
}

// Parse splits the bootstrap data, read from a file called name (Envoy
// picks the format by the extension).
func Parse(name string, data []byte) (*Bootstrap, error) {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
	default:
		return nil, notRewritable("only a YAML or JSON bootstrap is rewritten, not %s", filepath.Base(name))
	}
	var doc yaml.Node
	if err := bootyaml.Decode(data, &doc); err != nil {
		return nil, notRewritable("it cannot be parsed: %v", err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return nil, notRewritable("it is not a mapping")
	}
	if err := plain(root); err != nil {
		return nil, err
	}
	if value(root, "dynamic_resources") != nil {
		return nil, notRewritable("it has dynamic_resources (its own xDS)")
	}
	budget := watchesLeft(root)
	b := &Bootstrap{rest: shallow(root)}
	var static *yaml.Node
	if sr := value(root, "static_resources"); sr != nil {
		if sr.Kind != yaml.MappingNode {
			return nil, notRewritable("static_resources is not a mapping")
		}
		static = shallow(sr)
		set(b.rest, "static_resources", static)
	}
	var err error
	if b.listeners, err = resources(static, "listeners"); err != nil {
		return nil, err
	}
	if b.clusters, err = resources(static, "clusters"); err != nil {
		return nil, err
	}
	if static != nil {
		del(static, "listeners")
		del(static, "clusters")
	}
	// The routes are still inside the listeners: what they name counts.
	b.kept = keptClusters(b.rest, b.listeners, b.clusters)
	if len(b.kept) > 0 {
		seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for _, c := range b.clusters {
			if slices.Contains(b.kept, c.name) {
				seq.Content = append(seq.Content, c.node)
			}
		}
		set(static, "clusters", seq)
		b.clusters = slices.DeleteFunc(b.clusters, func(c resource) bool { return slices.Contains(b.kept, c.name) })
	}
	if static != nil {
		if b.secrets, err = moveSecrets(b.rest, static, b.listeners, b.clusters, min(MaxSecretFiles, budget)); err != nil {
			return nil, err
		}
	}
	b.routes, b.prefixes = moveRoutes(b.listeners, min(MaxRouteFiles, budget-len(b.secrets)))
	if static != nil && len(static.Content) == 0 {
		del(b.rest, "static_resources")
	}
	if b.restText, err = encode(b.rest); err != nil {
		return nil, err
	}
	return b, nil
}

// Listeners and Clusters are the names of the resources that can change in
// place; Kept the clusters that stay in the bootstrap.
func (b *Bootstrap) Listeners() []string { return names(b.listeners) }

// Clusters are the names of the clusters served from the resource files.
func (b *Bootstrap) Clusters() []string { return names(b.clusters) }

// Kept are the clusters that stay static, named from outside the listeners
// and clusters.
func (b *Bootstrap) Kept() []string { return slices.Clone(b.kept) }

func names(rs []resource) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.name
	}
	return out
}

// Runnable is the bootstrap Envoy runs: the rest, a node id and cluster if
// the operator set none, and dynamic_resources reading the files in dir.
func (b *Bootstrap) Runnable(dir string) ([]byte, error) {
	root := shallow(b.rest)
	node := value(root, "node")
	if node == nil || node.Kind != yaml.MappingNode {
		node = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		if value(root, "node") != nil {
			del(root, "node")
		}
		set(root, "node", node)
	} else {
		node = shallow(node)
		set(root, "node", node)
	}
	for _, k := range []string{"id", "cluster"} {
		if v := value(node, k); v == nil || v.Kind != yaml.ScalarNode || v.Value == "" {
			del(node, k)
			set(node, k, str(DefaultNode))
		}
	}
	source := func(file string) *yaml.Node {
		return mapping("path_config_source", mapping("path", str(filepath.Join(dir, file))), "resource_api_version", str("V3"))
	}
	set(root, "dynamic_resources", mapping("lds_config", source(ListenersFile), "cds_config", source(ClustersFile)))
	out, err := encode(root)
	return []byte(out), err
}

// resourceFile is a DiscoveryResponse of rs, typed typ, whose version is a
// digest of the resources, with the resource folder dir in the RDS and SDS
// sources that read from it (inFolder).
func resourceFile(typ string, rs []resource, dir string) ([]byte, error) {
	h := sha256.New()
	seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for _, r := range rs {
		h.Write(r.sum[:])
		n := shallow(r.node)
		if value(n, "@type") == nil {
			n.Content = append([]*yaml.Node{str("@type"), str(typ)}, n.Content...) // "@type" must be quoted
		}
		seq.Content = append(seq.Content, n)
	}
	version := hex.EncodeToString(h.Sum(nil))[:16]
	out, err := encode(mapping("version_info", str(version), "resources", seq))
	if err != nil {
		return nil, err
	}
	return inFolder([]byte(out), dir)
}

// ListenerFile is the LDS file of b's listeners, whose RDS and SDS sources
// read from the resource folder dir.
func (b *Bootstrap) ListenerFile(dir string) ([]byte, error) {
	return resourceFile(listenerType, b.listeners, dir)
}

// ClusterFile is the CDS file of b's dynamic clusters, whose SDS sources
// read from the resource folder dir.
func (b *Bootstrap) ClusterFile(dir string) ([]byte, error) {
	return resourceFile(clusterType, b.clusters, dir)
}

// resources takes the named sequence of static (nil: none) apart.
func resources(static *yaml.Node, key string) ([]resource, error) {
	if static == nil {
		return nil, nil
	}
	seq := value(static, key)
	if seq == nil {
		return nil, nil
	}
	if seq.Kind != yaml.SequenceNode {
		return nil, notRewritable("static_resources.%s is not a sequence", key)
	}
	var out []resource
	seen := map[string]bool{}
	for i, n := range seq.Content {
		name := value(n, "name")
		if n.Kind != yaml.MappingNode || name == nil || name.Kind != yaml.ScalarNode || name.Value == "" {
			return nil, notRewritable("static_resources.%s[%d] has no name", key, i)
		}
		if seen[name.Value] {
			return nil, notRewritable("static_resources.%s has two named %q", key, name.Value)
		}
		seen[name.Value] = true
		out = append(out, resource{name: name.Value, node: n, sum: digest(n)})
	}
	return out, nil
}

// keptClusters are the clusters that must stay static: those whose name is
// a scalar anywhere in rest (a stats sink's, a tracer's, an xDS source's),
// those a listener or cluster names as a gRPC or config source's
// cluster_name or cluster_names (Envoy wants those static), and those a
// kept cluster names in any way. Keeping one too many only means it cannot
// change in place.
func keptClusters(rest *yaml.Node, listeners, clusters []resource) []string {
	byName := map[string]*yaml.Node{}
	for _, c := range clusters {
		byName[c.name] = c.node
	}
	kept := map[string]bool{}
	var queue []*yaml.Node
	mark := func(s string) {
		if n, ok := byName[s]; ok && !kept[s] {
			kept[s] = true
			queue = append(queue, n)
		}
	}
	scalars(rest, mark)
	for _, r := range append(slices.Clone(listeners), clusters...) {
		sourceClusters(r.node, "", mark)
	}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		scalars(n, func(s string) {
			if s != value(n, "name").Value {
				mark(s)
			}
		})
	}
	var out []string
	for _, c := range clusters {
		if kept[c.name] {
			out = append(out, c.name)
		}
	}
	return out
}

// scalars calls f with every scalar under n.
func scalars(n *yaml.Node, f func(string)) {
	if n.Kind == yaml.ScalarNode {
		f(n.Value)
	}
	for _, c := range n.Content {
		scalars(c, f)
	}
}

// sourceClusters calls f with every cluster_name and cluster_names under n
// but a load_assignment's (the cluster's own name).
func sourceClusters(n *yaml.Node, parent string, f func(string)) {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i].Value, n.Content[i+1]
			switch {
			case k == "cluster_name" && parent != "load_assignment" && v.Kind == yaml.ScalarNode:
				f(v.Value)
			case k == "cluster_names" && v.Kind == yaml.SequenceNode:
				for _, c := range v.Content {
					f(c.Value)
				}
			default:
				sourceClusters(v, k, f)
			}
		}
		return
	}
	for _, c := range n.Content {
		sourceClusters(c, parent, f)
	}
}

// plain refuses anchors and aliases (a resource moved to another file would
// lose what it refers to) and drops comments (a changed comment is no
// change).
func plain(n *yaml.Node) error {
	if n.Kind == yaml.AliasNode || n.Anchor != "" || n.Tag == "!!merge" {
		return notRewritable("it uses YAML anchors or aliases (line %d)", n.Line)
	}
	n.HeadComment, n.LineComment, n.FootComment = "", "", ""
	for _, c := range n.Content {
		if err := plain(c); err != nil {
			return err
		}
	}
	return nil
}

func encode(n *yaml.Node) (string, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(n); err != nil {
		return "", fmt.Errorf("encode bootstrap: %w", err)
	}
	if err := enc.Close(); err != nil {
		return "", fmt.Errorf("encode bootstrap: %w", err)
	}
	return buf.String(), nil
}

// value is the value of key in mapping m, nil if none (or m is not one).
func value(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// shallow copies a node and its list of children (not the children).
func shallow(n *yaml.Node) *yaml.Node {
	c := *n
	c.Content = slices.Clone(n.Content)
	return &c
}

func set(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, plainKey(key), v)
}

// plainKey is a mapping key, plain.
func plainKey(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

func del(m *yaml.Node, key string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content = slices.Delete(m.Content, i, i+2)
			return
		}
	}
}

// str is a double-quoted string (Envoy's YAML reads a bare n or y as a bool).
func str(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s, Style: yaml.DoubleQuotedStyle}
}

func mapping(kv ...any) *yaml.Node {
	m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Content = append(m.Content, plainKey(kv[i].(string)), kv[i+1].(*yaml.Node))
	}
	return m
}
