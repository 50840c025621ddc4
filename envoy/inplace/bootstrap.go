// Step 3 of the rewrite (doc.go): the epoch copy split into the part
// Envoy reads at start and the resources it can read again.

package inplace

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"slices"

	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/envoy/xds/ads"
	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
)

// NotRewritableError says why a bootstrap runs as the operator wrote it,
// and so why every change to it is a hot restart.
type NotRewritableError struct{ Reason string }

func (e *NotRewritableError) Error() string { return "the bootstrap runs as it is: " + e.Reason }

func notRewritable(format string, args ...any) error {
	return &NotRewritableError{Reason: fmt.Sprintf(format, args...)}
}

// resource is one listener, route configuration, cluster or secret: its
// name, its YAML and that YAML's digest, which two bootstraps compare; a
// route configuration or secret also as Envoy is served it over ADS.
type resource struct {
	name   string
	node   *yaml.Node
	sum    [sha256.Size]byte // digest(node)
	served ads.Resource      // a route configuration's or secret's, converted
	owner  string            // a route configuration's: the listener it was moved out of
}

// digest is what two resources compare, and what a file's version is made
// of: the tree as Envoy reads it, each part length prefixed, without
// comments, positions or layout: its kinds, each key's text, and each
// value scalar as bootyaml.ReadScalar reads it (a plain yes and a true
// compare equal, a plain and a quoted name too), or its tag, style and
// text when it has a tag of its own. The files the agent writes hold that
// reading (bootyaml.Encode), so a tree read back from them compares equal
// to the one they were written from. Encoding each resource to YAML for
// the comparison took half of parsing a bootstrap of 1,000 listeners (60
// of 120 ms).
func digest(n *yaml.Node) [sha256.Size]byte {
	h := sha256.New()
	var buf [binary.MaxVarintLen64]byte
	put := func(s string) {
		h.Write(buf[:binary.PutUvarint(buf[:], uint64(len(s)))])
		h.Write([]byte(s))
	}
	var walk func(n *yaml.Node, key bool)
	walk = func(n *yaml.Node, key bool) {
		h.Write([]byte{byte(n.Kind)})
		switch {
		case n.Kind != yaml.ScalarNode:
		case n.Style&yaml.TaggedStyle != 0:
			h.Write([]byte{byte(n.Style)})
			put(n.Tag)
			put(n.Value)
		case key:
			put(n.Value)
		default:
			s := bootyaml.ReadScalar(n)
			h.Write([]byte{byte(s.Kind)})
			put(s.Text)
		}
		h.Write(buf[:binary.PutUvarint(buf[:], uint64(len(n.Content)))])
		for i, c := range n.Content {
			walk(c, n.Kind == yaml.MappingNode && i%2 == 0)
		}
	}
	walk(n, false)
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
	routes    []resource // the connection managers' route configurations (routes.go)
	clusters  []resource
	secrets   []resource      // the static secrets served over ADS (secrets.go)
	kept      []string        // clusters that stay static, named from outside
	named     []NamedListener // the listeners the operator left unnamed (names.go)
	inline    []string        // why a route configuration or secret stays in the bootstrap
}

// Parse splits the bootstrap data, read from a file called name (Envoy
// picks the format by the extension), into the part Envoy reads at start
// and the resources it can read again, or says with a *NotRewritableError
// why it runs as it is. convert (envoy/xds.Convert) makes each route
// configuration and secret what Envoy is served over ADS; one it cannot
// convert stays in the bootstrap (Inline says why). With convert nil,
// nothing is converted: the names and texts are those Envoy would run, but
// the Bootstrap cannot be written or applied (the configuration's checks).
func Parse(name string, data []byte, convert ads.Convert) (*Bootstrap, error) {
	doc, err := Decode(name, data)
	if err != nil {
		return nil, err
	}
	return ParseTree(name, doc, convert)
}

// Decode decodes the bootstrap data, read from a file called name, for
// ParseTree, or says with a *NotRewritableError why it runs as it is (not
// YAML or JSON, or it does not parse).
func Decode(name string, data []byte) (*yaml.Node, error) {
	if !bootyaml.Rewritable(name) {
		return nil, notRewritable("only a YAML or JSON bootstrap is rewritten, not %s", filepath.Base(name))
	}
	var doc yaml.Node
	if err := bootyaml.Decode(data, &doc); err != nil {
		return nil, notRewritable("it cannot be parsed: %v", err)
	}
	return &doc, nil
}

// ParseTree is Parse of the bootstrap decoded already (doc, what a copy's
// rewrite decoded: the bootstrap is decoded once on its way to Envoy). It
// takes doc apart: the caller does not use it after.
func ParseTree(name string, doc *yaml.Node, convert ads.Convert) (*Bootstrap, error) {
	p, err := rewritable(name, doc)
	if err != nil {
		return nil, err
	}
	p.convert = convert
	// The steps, in this order: each reads what the one before left.
	for _, step := range []func() error{
		p.nameListeners, // a. LDS keys listeners by name, and routes are named after them
		p.takeResources, // b. every listener named
		p.keepClusters,  // c. reads the listeners with their routes still inline: what routes name counts
		p.moveSecrets,   // d. the static secrets only moved resources name
		p.moveRoutes,    // e. each connection manager's routes
		p.encodeRest,    // f. the rest, with nothing left to move
	} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return p.b, nil
}

// parser is one Parse under way: the operator's tree, the rest being cut
// out of it, and the Bootstrap being filled.
type parser struct {
	root    *yaml.Node // the operator's top-level mapping
	static  *yaml.Node // rest's static_resources (a copy of the operator's), nil if none
	convert ads.Convert
	b       *Bootstrap
}

// rewritable refuses what cannot be rewritten: not YAML or JSON, not a
// mapping, anchors or aliases, dynamic_resources.
func rewritable(name string, doc *yaml.Node) (*parser, error) {
	if !bootyaml.Rewritable(name) {
		return nil, notRewritable("only a YAML or JSON bootstrap is rewritten, not %s", filepath.Base(name))
	}
	root := bootyaml.Root(doc)
	if root == nil {
		return nil, notRewritable("it is not a mapping")
	}
	if err := plain(root); err != nil {
		return nil, err
	}
	if bootyaml.Value(root, "dynamic_resources") != nil {
		return nil, notRewritable("it has dynamic_resources (its own xDS)")
	}
	p := &parser{root: root, b: &Bootstrap{rest: bootyaml.Shallow(root)}}
	if sr := bootyaml.Value(root, "static_resources"); sr != nil {
		if sr.Kind != yaml.MappingNode {
			return nil, notRewritable("static_resources is not a mapping")
		}
		p.static = bootyaml.Shallow(sr)
		bootyaml.Set(p.b.rest, "static_resources", p.static)
	}
	return p, nil
}

// takeResources takes the listeners and clusters out of static_resources.
func (p *parser) takeResources() error {
	var err error
	if p.b.listeners, err = resources(p.static, "listeners"); err != nil {
		return err
	}
	if p.b.clusters, err = resources(p.static, "clusters"); err != nil {
		return err
	}
	if p.static != nil {
		bootyaml.Del(p.static, "listeners")
		bootyaml.Del(p.static, "clusters")
	}
	return nil
}

// keepClusters puts back into static_resources the clusters that must stay
// static (keptClusters).
func (p *parser) keepClusters() error {
	b := p.b
	b.kept = keptClusters(b.rest, b.listeners, b.clusters)
	if len(b.kept) == 0 {
		return nil
	}
	seq := bootyaml.Seq()
	for _, c := range b.clusters {
		if slices.Contains(b.kept, c.name) {
			seq.Content = append(seq.Content, c.node)
		}
	}
	bootyaml.Set(p.static, "clusters", seq)
	b.clusters = slices.DeleteFunc(b.clusters, func(c resource) bool { return slices.Contains(b.kept, c.name) })
	return nil
}

// moveSecrets moves the static secrets that only moved resources name to
// ADS (secrets.go).
func (p *parser) moveSecrets() error {
	if p.static == nil {
		return nil
	}
	var err error
	var why []string
	p.b.secrets, why, err = moveSecrets(p.b.rest, p.static, p.b.listeners, p.b.clusters, p.convert)
	p.b.inline = append(p.b.inline, why...)
	return err
}

// moveRoutes moves the connection managers' inline routes to RDS over ADS
// (routes.go).
func (p *parser) moveRoutes() error {
	var why []string
	p.b.routes, why = moveRoutes(p.b.listeners, p.convert)
	p.b.inline = append(p.b.inline, why...)
	return nil
}

// encodeRest drops an emptied static_resources and keeps the rest's text.
func (p *parser) encodeRest() error {
	if p.static != nil && len(p.static.Content) == 0 {
		bootyaml.Del(p.b.rest, "static_resources")
	}
	text, err := bootyaml.Encode(p.b.rest, bootstrapFile)
	p.b.restText = string(text)
	return err
}

// Listeners and Clusters are the names of the resources that can change in
// place; Kept the clusters that stay in the bootstrap.
func (b *Bootstrap) Listeners() []string { return names(b.listeners) }

// Clusters are the names of the clusters served from the resource files.
func (b *Bootstrap) Clusters() []string { return names(b.clusters) }

// Kept are the clusters that stay static, named from outside the listeners
// and clusters.
func (b *Bootstrap) Kept() []string { return slices.Clone(b.kept) }

// Inline says, for each route configuration or secret that stays in the
// bootstrap because it could not be converted for ADS, which and why (a
// change of it is then a change of its listener, or of the bootstrap).
func (b *Bootstrap) Inline() []string { return slices.Clone(b.inline) }

// Reusing is convert, but a route configuration or secret that b holds
// converted already (the same YAML) is not converted again: a reload's new
// bootstrap converts what changed (1,000 route configurations took 20 to
// 30 ms).
func (b *Bootstrap) Reusing(convert ads.Convert) ads.Convert {
	done := map[[sha256.Size]byte]ads.Resource{}
	for _, r := range slices.Concat(b.routes, b.secrets) {
		if r.served.Name != "" {
			done[r.sum] = r.served
		}
	}
	return func(t ads.Type, n *yaml.Node) (ads.Resource, error) {
		if r, ok := done[digest(n)]; ok && r.Type == t {
			return r, nil
		}
		return convert(t, n)
	}
}

// Served are the route configurations (RouteType) or secrets (SecretType)
// Envoy is served over ADS, converted.
func (b *Bootstrap) Served(t ads.Type) []ads.Resource {
	rs := b.routes
	if t == ads.SecretType {
		rs = b.secrets
	}
	out := make([]ads.Resource, len(rs))
	for i, r := range rs {
		out[i] = r.served
	}
	return out
}

func names(rs []resource) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.name
	}
	return out
}

// resources takes the named sequence of static (nil: none) apart.
func resources(static *yaml.Node, key string) ([]resource, error) {
	if static == nil {
		return nil, nil
	}
	seq := bootyaml.Value(static, key)
	if seq == nil {
		return nil, nil
	}
	if seq.Kind != yaml.SequenceNode {
		return nil, notRewritable("static_resources.%s is not a sequence", key)
	}
	var out []resource
	seen := map[string]bool{}
	for i, n := range seq.Content {
		name := bootyaml.Value(n, "name")
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
			if s != bootyaml.Value(n, "name").Value {
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
