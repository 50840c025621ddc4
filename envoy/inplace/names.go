// Names for the listeners a bootstrap leaves unnamed (step 3a, doc.go):
// Envoy allows a static listener without a name (it makes one up at each
// start), but LDS keys listeners by name, and a route configuration moved
// out of its listener is named after it.

package inplace

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
)

// NamedListener is a listener the bootstrap leaves unnamed, and the name
// the agent gives it in the files it writes.
type NamedListener struct {
	Name    string // the name given
	Index   int    // its place in static_resources.listeners
	Address string // what the name was made from ("" when by its place)
}

func (n NamedListener) String() string {
	if n.Address == "" {
		return fmt.Sprintf("%s (static_resources.listeners[%d])", n.Name, n.Index)
	}
	return fmt.Sprintf("%s (static_resources.listeners[%d], %s)", n.Name, n.Index, n.Address)
}

// Named lists the listeners the bootstrap leaves unnamed, with the names
// they run under.
func (b *Bootstrap) Named() []NamedListener { return append([]NamedListener(nil), b.named...) }

// nameListeners gives each listener without a name one made from its
// address as Envoy's own listener statistics spell it (listener.<name>.*):
// 0.0.0.0_10000 for 0.0.0.0:10000, [__1]_443 for [::1]:443, _udp after a
// UDP one's, pipe_<path> for a unix socket. An edit that keeps a
// listener's address keeps its name. Where two unnamed listeners would get
// the same name, or an operator's listener has it already, each gets its
// place after it (0.0.0.0_10000-2), or listener-<place> when it has no
// address the agent can spell.
func (p *parser) nameListeners() error {
	seq := bootyaml.Value(p.static, "listeners")
	items := bootyaml.Items(seq)
	taken := map[string]bool{}
	var unnamed []int
	for i, l := range items {
		switch name := bootyaml.Text(bootyaml.Value(l, "name")); {
		case name != "":
			taken[name] = true
		case l.Kind == yaml.MappingNode:
			unnamed = append(unnamed, i)
		}
	}
	if len(unnamed) == 0 {
		return nil
	}
	derived := map[int]string{}
	count := map[string]int{}
	for _, i := range unnamed {
		derived[i] = addressName(items[i])
		count[derived[i]]++
	}
	named := bootyaml.Shallow(seq)
	for _, i := range unnamed {
		d := derived[i]
		name := d
		switch {
		case d == "":
			name = fmt.Sprintf("listener-%d", i)
		case count[d] > 1 || taken[d]:
			name = fmt.Sprintf("%s-%d", d, i)
		}
		for taken[name] {
			name += "-"
		}
		taken[name] = true
		l := bootyaml.Shallow(items[i])
		if bootyaml.Index(l, "name") >= 0 {
			bootyaml.Set(l, "name", bootyaml.Str(name)) // name: ""
		} else {
			l.Content = append([]*yaml.Node{bootyaml.Key("name"), bootyaml.Str(name)}, l.Content...)
		}
		named.Content[i] = l
		n := NamedListener{Name: name, Index: i}
		if name != fmt.Sprintf("listener-%d", i) {
			n.Address = addressText(items[i])
		}
		p.b.named = append(p.b.named, n)
	}
	bootyaml.Set(p.static, "listeners", named)
	return nil
}

// addressName is the name of listener l made from its address, "" when it
// has none the agent can spell.
func addressName(l *yaml.Node) string {
	a := bootyaml.Value(l, "address")
	if sa := bootyaml.Value(a, "socket_address"); sa != nil {
		host, port := bootyaml.Text(bootyaml.Value(sa, "address")), bootyaml.Text(bootyaml.Value(sa, "port_value"))
		if host == "" || port == "" {
			return ""
		}
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
		name := host + "_" + port
		if strings.EqualFold(bootyaml.Text(bootyaml.Value(sa, "protocol")), "UDP") {
			name += "_udp"
		}
		return statName(name)
	}
	if path := bootyaml.Text(bootyaml.Value(bootyaml.Value(a, "pipe"), "path")); path != "" {
		return statName("pipe_" + path)
	}
	return ""
}

// addressText is listener l's address as an operator writes it, for the
// log.
func addressText(l *yaml.Node) string {
	a := bootyaml.Value(l, "address")
	if sa := bootyaml.Value(a, "socket_address"); sa != nil {
		s := hostPort(bootyaml.Text(bootyaml.Value(sa, "address")), bootyaml.Text(bootyaml.Value(sa, "port_value")))
		if p := bootyaml.Text(bootyaml.Value(sa, "protocol")); p != "" {
			s += "/" + strings.ToLower(p)
		}
		return s
	}
	return bootyaml.Text(bootyaml.Value(bootyaml.Value(a, "pipe"), "path"))
}

// statName is s with every character a statistic's name of Envoy's would
// not keep as it is (outside safeName's) as '_', as Envoy writes a colon.
func statName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_.[]-", r) {
			return r
		}
		return '_'
	}, s)
}
