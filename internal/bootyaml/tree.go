// The tree of a bootstrap once decoded: looking up, setting and deleting a
// field, building nodes, and encoding the tree back, shared by every step
// of the agent's rewrite of a bootstrap (envoy/certs, envoy/inplace).

package bootyaml

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Rewritable reports whether a bootstrap file called name is one the agent
// can rewrite: Envoy reads .yaml, .yml and .json as YAML (JSON is YAML),
// and .pb and .pb_text as protobuf, which the agent leaves as they are.
func Rewritable(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// Root is the top-level mapping of a decoded document, nil when it has
// none.
func Root(doc *yaml.Node) *yaml.Node {
	n := doc
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	if n.Kind != yaml.MappingNode {
		return nil
	}
	return n
}

// SameField reports whether a and b name the same protobuf field: Envoy
// takes a field in either spelling (tls_certificates, tlsCertificates).
// It allocates nothing: it runs for every key a rewrite looks at.
func SameField(a, b string) bool {
	i, j := 0, 0
	for {
		for i < len(a) && a[i] == '_' {
			i++
		}
		for j < len(b) && b[j] == '_' {
			j++
		}
		if i == len(a) || j == len(b) {
			return i == len(a) && j == len(b)
		}
		if lower(a[i]) != lower(b[j]) {
			return false
		}
		i++
		j++
	}
}

// Norm folds a protobuf field name in either spelling to one
// (validation_context_sds_secret_config, validationContextSdsSecretConfig:
// validationcontextsdssecretconfig), for a match on part of a name.
func Norm(field string) string { return strings.ReplaceAll(strings.ToLower(field), "_", "") }

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// Index is the position in mapping m's Content of the key field (either
// spelling), -1 when m has none or is not a mapping.
func Index(m *yaml.Node, field string) int {
	if m == nil || m.Kind != yaml.MappingNode {
		return -1
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if SameField(m.Content[i].Value, field) {
			return i
		}
	}
	return -1
}

// Value is the value of field (either spelling) in mapping m, nil when m
// has none or is not a mapping.
func Value(m *yaml.Node, field string) *yaml.Node {
	if i := Index(m, field); i >= 0 {
		return m.Content[i+1]
	}
	return nil
}

// Text is n's value when n is a scalar, else "".
func Text(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.Value
}

// Items are the elements of sequence n, none when n is not a sequence (or
// is nil).
func Items(n *yaml.Node) []*yaml.Node {
	if n == nil || n.Kind != yaml.SequenceNode {
		return nil
	}
	return n.Content
}

// Set makes v the value of field in mapping m: in place of the value it
// has (keeping the key's spelling), or as a new last key.
func Set(m *yaml.Node, field string, v *yaml.Node) {
	if i := Index(m, field); i >= 0 {
		m.Content[i+1] = v
		return
	}
	m.Content = append(m.Content, Key(field), v)
}

// Del removes field (either spelling) from mapping m.
func Del(m *yaml.Node, field string) {
	if i := Index(m, field); i >= 0 {
		m.Content = slices.Delete(m.Content, i, i+2)
	}
}

// Shallow copies a node and its list of children (not the children), so
// that a step can change which children a node has without changing the
// tree it came from.
func Shallow(n *yaml.Node) *yaml.Node {
	c := *n
	c.Content = slices.Clone(n.Content)
	return &c
}

// Clone copies the tree n whole, so that a step can take one copy apart
// and keep the other as it was (a tenth to a quarter of what decoding it
// again costs).
func Clone(n *yaml.Node) *yaml.Node {
	c := *n
	if len(n.Content) > 0 {
		c.Content = make([]*yaml.Node, len(n.Content))
		for i, k := range n.Content {
			c.Content[i] = Clone(k)
		}
	}
	return &c
}

// Key is a mapping key: a plain string.
func Key(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

// Str is a string value, double-quoted: Envoy's YAML reads a bare n, y,
// on or off as a boolean.
func Str(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s, Style: yaml.DoubleQuotedStyle}
}

// Int is an integer value.
func Int(i int) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: fmt.Sprint(i)}
}

// Mapping is a mapping of key, value pairs: each key a string, each value
// a *yaml.Node.
func Mapping(kv ...any) *yaml.Node {
	m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Content = append(m.Content, Key(kv[i].(string)), kv[i+1].(*yaml.Node))
	}
	return m
}

// Seq is a sequence of nodes.
func Seq(items ...*yaml.Node) *yaml.Node {
	return &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: items}
}

// Encode writes the tree n back in the format of a file called name: JSON
// for .json (which keeps it readable by what reads the operator's JSON),
// else YAML: in the flow style, as Envoy reads it (flow), or, for a tree
// with what that does not write (anchors, explicit tags), indented by two
// with comments and quoting kept.
func Encode(n *yaml.Node, name string) ([]byte, error) {
	if strings.EqualFold(filepath.Ext(name), ".json") {
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, fmt.Errorf("encode bootstrap: %w", err)
		}
		out, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("encode bootstrap: %w", err)
		}
		return out, nil
	}
	if out, ok := flow(n); ok {
		return out, nil
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(n); err != nil {
		return nil, fmt.Errorf("encode bootstrap: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encode bootstrap: %w", err)
	}
	return buf.Bytes(), nil
}
