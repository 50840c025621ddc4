// What a reload in place has Envoy validate before it changes anything:
// the bootstrap cut down to what the change touches, so that validating a
// route edit of one of 1,000 listeners costs what validating one listener
// costs (Envoy's --mode validate of the whole file took 593 to 732 ms of
// such a reload, and validating grows with every listener, changed or not).

package inplace

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
)

// Subset is the bootstrap a reload in place to new, by the change c, has Envoy
// validate (--mode validate), made of copy, the new bootstrap copy as its
// rewrite left it and before Parse split it (routes inline in their
// listeners, static secrets in static_resources: validated as the static
// bootstrap they are, so that what --mode validate refuses in the whole
// file it refuses here). Everything outside static_resources' listeners,
// clusters and secrets stays (node, admin, the clusters that stay static,
// the secrets that stay static); of those three it keeps:
//
//   - the listeners c adds or updates, and those whose routes it adds or
//     updates;
//   - the listeners unchanged that name a cluster or secret c adds,
//     updates or removes (any scalar equal to its name), so that a cluster
//     removed while a route still names it, or a secret whose new key does
//     not match its certificate, is refused as the whole file's
//     validation refuses it;
//   - the listeners unchanged at an address an added or updated listener
//     has (Envoy refuses two listeners at one address);
//   - the clusters c adds or updates, those unchanged that name a cluster
//     or secret c changes, and every cluster any kept listener or cluster
//     names, and so on;
//   - the secrets moved to ADS that a kept listener or cluster names.
//
// Keeping one too many costs only its validation. copy is taken apart
// (the caller's own copy of the tree): a bootstrap Subset cannot cut
// (listeners it cannot line up with new's) comes back whole.
func Subset(copy *yaml.Node, new *Bootstrap, c Change) *yaml.Node {
	root := bootyaml.Root(copy)
	static := bootyaml.Value(root, "static_resources")
	if static == nil || static.Kind != yaml.MappingNode {
		return copy
	}
	// Parse keeps the listeners' order: the copy's listener i is new's.
	listeners := bootyaml.Items(bootyaml.Value(static, "listeners"))
	if len(listeners) != len(new.listeners) {
		return copy
	}
	clusters := map[string]*yaml.Node{} // the dynamic ones, as the copy has them
	dynamic := set(new.Clusters())
	for _, n := range bootyaml.Items(bootyaml.Value(static, "clusters")) {
		if name := bootyaml.Text(bootyaml.Value(n, "name")); dynamic[name] {
			clusters[name] = n
		}
	}
	index := map[string]int{}
	for i, l := range new.listeners {
		index[l.name] = i
	}
	keep := map[int]bool{}
	for _, name := range slices.Concat(c.Listeners.Added, c.Listeners.Updated) {
		keep[index[name]] = true
	}
	routes := set(slices.Concat(c.Routes.Added, c.Routes.Updated))
	for _, r := range new.routes {
		if routes[r.name] {
			keep[index[r.owner]] = true
		}
	}
	// What unchanged resources must still find as they name it.
	named := set(slices.Concat(c.Clusters.Added, c.Clusters.Updated, c.Clusters.Removed, c.Secrets.Added, c.Secrets.Updated, c.Secrets.Removed))
	keepCluster := set(slices.Concat(c.Clusters.Added, c.Clusters.Updated))
	if len(named) > 0 {
		for i, l := range listeners {
			if !keep[i] && mentions(l, named) {
				keep[i] = true
			}
		}
		for name, n := range clusters {
			if mentions(n, named) {
				keepCluster[name] = true
			}
		}
	}
	sameAddress(listeners, keep, slices.Concat(c.Listeners.Added, c.Listeners.Updated), index)

	// Everything the kept listeners and clusters name, and what that
	// names.
	moved := set(new.Secrets())
	keepSecret := map[string]bool{}
	var queue []*yaml.Node
	for i, l := range listeners {
		if keep[i] {
			queue = append(queue, l)
		}
	}
	for name := range keepCluster {
		queue = append(queue, clusters[name])
	}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		scalars(n, func(s string) {
			switch {
			case moved[s]:
				keepSecret[s] = true
			case clusters[s] != nil && !keepCluster[s]:
				keepCluster[s] = true
				queue = append(queue, clusters[s])
			}
		})
	}

	out := bootyaml.Shallow(root)
	st := bootyaml.Shallow(static)
	bootyaml.Set(out, "static_resources", st)
	filter(st, "listeners", func(i int, _ string) bool { return keep[i] })
	filter(st, "clusters", func(_ int, name string) bool { return !dynamic[name] || keepCluster[name] })
	filter(st, "secrets", func(_ int, name string) bool { return !moved[name] || keepSecret[name] })
	return &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{out}}
}

// sameAddress adds to keep the listeners at an address (or an additional
// address) that one of changed, the listeners added or updated, has.
func sameAddress(listeners []*yaml.Node, keep map[int]bool, changed []string, index map[string]int) {
	if len(changed) == 0 {
		return
	}
	taken := map[string]bool{}
	for _, name := range changed {
		for _, a := range addresses(listeners[index[name]]) {
			taken[a] = true
		}
	}
	for i, l := range listeners {
		if keep[i] {
			continue
		}
		for _, a := range addresses(l) {
			if taken[a] {
				keep[i] = true
			}
		}
	}
}

// addresses are a listener's address and additional addresses, each as
// Envoy compares two listeners' (an IP address in its canonical form, the
// port, the protocol; a unix socket's path), whichever way they are
// written.
func addresses(l *yaml.Node) []string {
	var out []string
	add := func(a *yaml.Node) {
		if pipe := bootyaml.Value(a, "pipe"); pipe != nil {
			out = append(out, "pipe "+bootyaml.Text(bootyaml.Value(pipe, "path")))
			return
		}
		sa := bootyaml.Value(a, "socket_address")
		if sa == nil {
			return
		}
		host := bootyaml.Text(bootyaml.Value(sa, "address"))
		if ip, err := netip.ParseAddr(host); err == nil {
			host = ip.Unmap().String()
		}
		out = append(out, fmt.Sprintf("%s %s %s", strings.ToUpper(cmp.Or(bootyaml.Text(bootyaml.Value(sa, "protocol")), "TCP")), host, bootyaml.Text(bootyaml.Value(sa, "port_value"))))
	}
	if a := bootyaml.Value(l, "address"); a != nil {
		add(a)
	}
	for _, extra := range bootyaml.Items(bootyaml.Value(l, "additional_addresses")) {
		if a := bootyaml.Value(extra, "address"); a != nil {
			add(a)
		}
	}
	return out
}

// filter keeps in static's sequence key the items keep says (by place and
// name), in a sequence of its own; an empty one goes.
func filter(static *yaml.Node, key string, keep func(i int, name string) bool) {
	items := bootyaml.Items(bootyaml.Value(static, key))
	if items == nil {
		return
	}
	seq := bootyaml.Seq()
	for i, n := range items {
		if keep(i, bootyaml.Text(bootyaml.Value(n, "name"))) {
			seq.Content = append(seq.Content, n)
		}
	}
	if len(seq.Content) == 0 {
		bootyaml.Del(static, key)
		return
	}
	bootyaml.Set(static, key, seq)
}

// mentions reports whether a scalar under n is one of names.
func mentions(n *yaml.Node, names map[string]bool) bool {
	if n.Kind == yaml.ScalarNode {
		return names[n.Value]
	}
	for _, c := range n.Content {
		if mentions(c, names) {
			return true
		}
	}
	return false
}

func set(names []string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}
