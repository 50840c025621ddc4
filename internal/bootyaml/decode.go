package bootyaml

import (
	"errors"
	"fmt"

	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/internal/safefile"
)

const (
	// MaxSize is the largest bootstrap the agent reads, to check it or to
	// copy it for an epoch. yaml keeps a few copies of a long scalar (an
	// 8 MiB one peaked at 45 MB).
	MaxSize = 4 << 20
	// MaxTokens bounds the tokens of a bootstrap, each weighed by what
	// yaml's parse can spend on it, in units of about 200 bytes (an empty
	// node): 3 for the indicators ? : and - (a "?" in a flow sequence is a
	// mapping, its key and its value), 2 for a run of other text between
	// blanks and indicators (a scalar), 1 for the other indicators
	// ([ ] { } , * & ! | >). It knows nothing of strings or comments, so it
	// weighs more than yaml spends, never less. A static cluster of a
	// bootstrap, about 330 bytes, weighs about 85: this is room for MaxSize
	// of such YAML (some 12,000 clusters), so that for a bootstrap written
	// as operators write them the size is the bound, not this: 240,000, a
	// megabyte of it, refused 1,000 SNI filter chains with a connection
	// manager each that a bare Envoy serves. Its nodes then take about
	// 220 MB at most.
	MaxTokens = 1_100_000
	// MaxNodes bounds the nodes a document holds once its aliases are
	// expanded, which is what a decode into a generic tree builds: as
	// many as MaxTokens allows without aliases.
	MaxNodes = MaxTokens
	// MaxKeyPairs bounds the pairs of keys yaml compares as it decodes:
	// every key of a mapping with every other, each time the mapping is
	// decoded (once more for each alias of it). A mapping of 150,000 keys
	// is 10^10 comparisons, and with equal keys as many error strings;
	// 5*10^7, one mapping of 10,000 keys, takes about 0.1 s.
	MaxKeyPairs = 50_000_000
)

// LimitError is a bootstrap refused for its size, before or after parsing:
// a syntax error is a yaml error instead. Its message follows the file's
// name ("envoy.yaml: has more than …").
type LimitError struct {
	Msg string
}

func (e *LimitError) Error() string { return e.Msg }

// Decode decodes the first document of the bootstrap in data into v, as
// yaml.Unmarshal does (v may be a struct, or a map[string]any for a generic
// tree), and refuses, with a *LimitError, data larger than MaxSize, of more
// than MaxTokens tokens, or whose aliases expand past MaxNodes nodes. Its
// memory is then a few tens of MB at most, whatever data holds.
func Decode(data []byte, v any) error {
	if len(data) > MaxSize {
		return &LimitError{Msg: fmt.Sprintf("is %d bytes; more than %d are refused", len(data), MaxSize)}
	}
	if n, line := countTokens(data); n > MaxTokens {
		return &LimitError{Msg: fmt.Sprintf("has more than %d YAML tokens (indicators and words) by line %d; more are refused before it is parsed", MaxTokens, line)}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return err
	}
	if doc.Kind == 0 {
		return nil // an empty document: v is left as it is, as yaml.Unmarshal leaves it
	}
	e := expansion{memo: map[*yaml.Node]cost{}}
	switch c := e.count(&doc); {
	case c.nodes > MaxNodes:
		return &LimitError{Msg: fmt.Sprintf("has aliases that expand it to more than %d nodes; more are refused before it is decoded", MaxNodes)}
	case c.pairs > MaxKeyPairs:
		return &LimitError{Msg: fmt.Sprintf("has more than %d pairs of mapping keys for yaml to compare (a mapping of n keys has n(n-1)/2, once for each alias of it); more are refused before it is decoded", MaxKeyPairs)}
	}
	if err := checkKeys(&doc, map[*yaml.Node]bool{}); err != nil {
		return err
	}
	if err := doc.Decode(v); err != nil {
		return err
	}
	return nil
}

// ReadFile reads the bootstrap at path (a regular file of at most MaxSize
// bytes, see safefile.ReadRegular) and decodes it into v with Decode.
func ReadFile(path string, v any) error {
	data, err := safefile.ReadRegular(path, MaxSize)
	if err != nil {
		return err
	}
	if err := Decode(data, v); err != nil {
		var le *LimitError
		if errors.As(err, &le) {
			return &LimitError{Msg: path + ": " + le.Msg}
		}
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// weight is what the YAML indicator c counts towards MaxTokens, 0 for any
// other byte.
func weight(c byte) int {
	switch c {
	case '?', ':', '-':
		return 3
	case '[', ']', '{', '}', ',', '*', '&', '!', '|', '>':
		return 1
	}
	return 0
}

// countTokens counts data's tokens as MaxTokens defines them, stopping once
// past it, and the line it stopped at. It knows nothing of strings or
// comments, so it counts more than yaml's tokens, never fewer: every node
// yaml makes starts at an indicator or at a run of text.
func countTokens(data []byte) (n, line int) {
	line = 1
	inWord := false
	for _, c := range data {
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			inWord = false
			if c == '\n' {
				line++
			}
		case weight(c) > 0:
			inWord = false
			n += weight(c)
		case !inWord:
			inWord = true
			n += 2
		}
		if n > MaxTokens {
			return n, line
		}
	}
	return n, line
}

// cost is what decoding a node costs yaml: its nodes with its aliases
// expanded, and the pairs of mapping keys it compares.
type cost struct {
	nodes, pairs int
}

func (c cost) over() bool { return c.nodes > MaxNodes || c.pairs > MaxKeyPairs }

// expansion counts the cost of a document with its aliases expanded, each
// anchored node counted once and remembered.
type expansion struct {
	memo map[*yaml.Node]cost
}

func (e *expansion) count(n *yaml.Node) cost {
	if n == nil {
		return cost{}
	}
	if n.Kind == yaml.AliasNode {
		if c, ok := e.memo[n.Alias]; ok {
			return c
		}
		e.memo[n.Alias] = cost{nodes: MaxNodes + 1} // an alias inside its own anchor: yaml refuses it
		c := e.count(n.Alias)
		e.memo[n.Alias] = c
		return c
	}
	total := cost{nodes: 1}
	if n.Kind == yaml.MappingNode {
		k := len(n.Content) / 2
		total.pairs = k * (k - 1) / 2
	}
	for _, child := range n.Content {
		c := e.count(child)
		total.nodes += c.nodes
		total.pairs += c.pairs
		if total.over() {
			return total
		}
	}
	return total
}

// mappingKey is what yaml compares two keys of a mapping by.
type mappingKey struct {
	kind  yaml.Kind
	value string
}

// checkKeys reports the first key a mapping repeats, as yaml would, before
// yaml's decode, which makes an error of every pair of equal keys (n keys
// all equal are n(n-1)/2 strings). Each node is seen once.
func checkKeys(n *yaml.Node, seen map[*yaml.Node]bool) error {
	if n == nil || seen[n] {
		return nil
	}
	seen[n] = true
	if n.Kind == yaml.AliasNode {
		return checkKeys(n.Alias, seen)
	}
	if n.Kind == yaml.MappingNode {
		keys := make(map[mappingKey]int, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			mk := mappingKey{k.Kind, k.Value}
			if line, dup := keys[mk]; dup {
				return fmt.Errorf("yaml: line %d: mapping key %q already defined at line %d", k.Line, shorten(k.Value), line)
			}
			keys[mk] = k.Line
		}
	}
	for _, c := range n.Content {
		if err := checkKeys(c, seen); err != nil {
			return err
		}
	}
	return nil
}

// shorten cuts a key for an error: a bootstrap's keys are short, a
// hostile one need not be, and a value may be a secret.
func shorten(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
