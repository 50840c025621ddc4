// The JSON that protobuf's parser gets from a resource's YAML: Envoy's
// reading of each scalar (bootyaml.ReadScalar), checked against the field it goes
// to, so that what Go's protojson then makes of it is what Envoy's C++
// parser makes of the same YAML, or an error. Where the two parsers differ
// it takes Envoy's side when that was measured (an enum's name in any case,
// a quoted "true" for a bool) and refuses the rest (a number for a string
// field, which Envoy refuses too; a float written as 1. or .5; duplicate
// keys, which Envoy takes the last of; explicit tags; anchors).

package xds

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
)

// maxDepth bounds how deep a resource nests: Envoy's deepest resources
// (matchers in matchers) stay far below it, and a hostile input then costs
// no more than its size.
const maxDepth = 100

// FieldError is a resource that does not convert: Line is the YAML line
// (0 when unknown), Path the field's place in the resource.
type FieldError struct {
	Line int
	Path string
	Msg  string
}

func (e *FieldError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s: %s", e.Line, e.Path, e.Msg)
	}
	return e.Path + ": " + e.Msg
}

// jsonNumber is a float as both parsers read it from a string: JSON's
// number syntax.
var jsonNumber = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?$`)
})

// encoder writes the JSON of one resource.
type encoder struct {
	buf []byte
	res *registry
}

func (e *encoder) fail(n *yaml.Node, path, format string, args ...any) error {
	line := 0
	if n != nil {
		line = n.Line
	}
	return &FieldError{Line: line, Path: path, Msg: fmt.Sprintf(format, args...)}
}

// plain checks what every node must be: no alias, anchor or tag of its own.
func (e *encoder) plain(n *yaml.Node, path string, depth int) error {
	if depth > maxDepth {
		return e.fail(n, path, "nested more than %d deep", maxDepth)
	}
	switch {
	case n.Kind == yaml.AliasNode || n.Anchor != "":
		return e.fail(n, path, "YAML anchors and aliases are not converted")
	case n.Style&yaml.TaggedStyle != 0:
		return e.fail(n, path, "an explicit tag (%s) is not converted: Envoy reads tagged scalars by their text", n.Tag)
	}
	return nil
}

func (e *encoder) str(s string) {
	b, _ := json.Marshal(s) // a Go string always encodes
	e.buf = append(e.buf, b...)
}

// pairs calls f with each key and value of the mapping n, refusing
// duplicate and non-scalar keys.
func (e *encoder) pairs(n *yaml.Node, path string, depth int, f func(key string, k, v *yaml.Node) error) error {
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if err := e.plain(k, path, depth); err != nil {
			return err
		}
		if k.Kind != yaml.ScalarNode {
			return e.fail(k, path, "a key is not a scalar")
		}
		if seen[k.Value] {
			return e.fail(k, path, "key %q given twice (Envoy would take the last)", k.Value)
		}
		seen[k.Value] = true
		if err := f(k.Value, k, v); err != nil {
			return err
		}
	}
	return nil
}

// message writes n as the message md.
func (e *encoder) message(n *yaml.Node, md protoreflect.MessageDescriptor, path string, depth int) error {
	if err := e.plain(n, path, depth); err != nil {
		return err
	}
	if n.Kind == yaml.ScalarNode && bootyaml.ReadScalar(n).Kind == bootyaml.KindNull {
		e.buf = append(e.buf, "null"...)
		return nil
	}
	switch md.FullName() {
	case "google.protobuf.Any":
		return e.anyMessage(n, path, depth)
	case "google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue":
		if md.FullName() == "google.protobuf.Struct" && n.Kind != yaml.MappingNode {
			return e.fail(n, path, "want a mapping")
		}
		if md.FullName() == "google.protobuf.ListValue" && n.Kind != yaml.SequenceNode {
			return e.fail(n, path, "want a sequence")
		}
		return e.value(n, path, depth)
	case "google.protobuf.Duration", "google.protobuf.Timestamp", "google.protobuf.FieldMask":
		s, err := e.scalarOf(n, path)
		if err != nil {
			return err
		}
		if s.Kind != bootyaml.KindString {
			return e.fail(n, path, "want a string (such as 5s for a duration)")
		}
		e.str(s.Text)
		return nil
	}
	if isWrapper(md) {
		return e.single(n, md.Fields().ByName("value"), path, depth)
	}
	if n.Kind != yaml.MappingNode {
		return e.fail(n, path, "want a mapping for %s", md.FullName())
	}
	e.buf = append(e.buf, '{')
	first := true
	err := e.pairs(n, path, depth, func(key string, k, v *yaml.Node) error {
		fd := md.Fields().ByName(protoreflect.Name(key))
		if fd == nil {
			fd = md.Fields().ByJSONName(key)
		}
		if fd == nil {
			return e.fail(k, path, "no field %q in %s", key, md.FullName())
		}
		if !first {
			e.buf = append(e.buf, ',')
		}
		first = false
		e.str(key)
		e.buf = append(e.buf, ':')
		return e.field(v, fd, join(path, key), depth+1)
	})
	e.buf = append(e.buf, '}')
	return err
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// isWrapper says md is one of google.protobuf's wrappers (UInt32Value...),
// which JSON writes as their value alone.
func isWrapper(md protoreflect.MessageDescriptor) bool {
	return md.ParentFile().Package() == "google.protobuf" && strings.HasSuffix(string(md.Name()), "Value") &&
		md.Name() != "Value" && md.Fields().Len() == 1 && md.Fields().Get(0).Name() == "value"
}

// anyMessage writes an Any: its @type, found in the descriptors, then the
// rest as that type (or, for a type JSON writes as a value, as "value").
func (e *encoder) anyMessage(n *yaml.Node, path string, depth int) error {
	if n.Kind != yaml.MappingNode {
		return e.fail(n, path, "want a mapping with an @type")
	}
	var url *yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "@type" {
			url = n.Content[i+1]
		}
	}
	if url == nil || url.Kind != yaml.ScalarNode || bootyaml.ReadScalar(url).Kind != bootyaml.KindString {
		return e.fail(n, path, "an Any needs an @type")
	}
	mt, err := e.res.FindMessageByURL(url.Value)
	if err != nil {
		return e.fail(url, path, "unknown type %s (not in Envoy's API at this release)", url.Value)
	}
	md := mt.Descriptor()
	e.buf = append(e.buf, '{')
	e.str("@type")
	e.buf = append(e.buf, ':')
	e.str(url.Value)
	special := md.FullName() == "google.protobuf.Any" || md.ParentFile().Package() == "google.protobuf" &&
		(isWrapper(md) || md.Name() == "Struct" || md.Name() == "Value" || md.Name() == "ListValue" ||
			md.Name() == "Duration" || md.Name() == "Timestamp" || md.Name() == "FieldMask")
	err = e.pairs(n, path, depth, func(key string, k, v *yaml.Node) error {
		if key == "@type" {
			return nil
		}
		e.buf = append(e.buf, ',')
		if special {
			if key != "value" {
				return e.fail(k, path, "an Any of %s holds only value", md.FullName())
			}
			e.str("value")
			e.buf = append(e.buf, ':')
			return e.message(v, md, join(path, key), depth+1)
		}
		fd := md.Fields().ByName(protoreflect.Name(key))
		if fd == nil {
			fd = md.Fields().ByJSONName(key)
		}
		if fd == nil {
			return e.fail(k, path, "no field %q in %s", key, md.FullName())
		}
		e.str(key)
		e.buf = append(e.buf, ':')
		return e.field(v, fd, join(path, key), depth+1)
	})
	e.buf = append(e.buf, '}')
	return err
}

// field writes n as the field fd: a map, a list or one value.
func (e *encoder) field(n *yaml.Node, fd protoreflect.FieldDescriptor, path string, depth int) error {
	if err := e.plain(n, path, depth); err != nil {
		return err
	}
	if n.Kind == yaml.ScalarNode && bootyaml.ReadScalar(n).Kind == bootyaml.KindNull && !isValue(fd) {
		e.buf = append(e.buf, "null"...) // both parsers leave the field unset
		return nil
	}
	switch {
	case fd.IsMap():
		if n.Kind != yaml.MappingNode {
			return e.fail(n, path, "want a mapping")
		}
		e.buf = append(e.buf, '{')
		first := true
		err := e.pairs(n, path, depth, func(key string, _, v *yaml.Node) error {
			if !first {
				e.buf = append(e.buf, ',')
			}
			first = false
			e.str(key)
			e.buf = append(e.buf, ':')
			return e.single(v, fd.MapValue(), join(path, key), depth+1)
		})
		e.buf = append(e.buf, '}')
		return err
	case fd.IsList():
		if n.Kind != yaml.SequenceNode {
			return e.fail(n, path, "want a sequence")
		}
		e.buf = append(e.buf, '[')
		for i, c := range n.Content {
			if i > 0 {
				e.buf = append(e.buf, ',')
			}
			if err := e.single(c, fd, fmt.Sprintf("%s[%d]", path, i), depth+1); err != nil {
				return err
			}
		}
		e.buf = append(e.buf, ']')
		return nil
	}
	return e.single(n, fd, path, depth)
}

func isValue(fd protoreflect.FieldDescriptor) bool {
	return fd.Message() != nil && fd.Message().FullName() == "google.protobuf.Value"
}

// scalarOf is n read as Envoy reads a scalar, or an error when n is not
// one.
func (e *encoder) scalarOf(n *yaml.Node, path string) (bootyaml.Scalar, error) {
	if n.Kind != yaml.ScalarNode {
		return bootyaml.Scalar{}, e.fail(n, path, "want a scalar")
	}
	return bootyaml.ReadScalar(n), nil
}

// single writes n as one value of the field fd (an element of a list or
// map, or the field itself).
func (e *encoder) single(n *yaml.Node, fd protoreflect.FieldDescriptor, path string, depth int) error {
	if err := e.plain(n, path, depth); err != nil {
		return err
	}
	if fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind {
		return e.message(n, fd.Message(), path, depth)
	}
	s, err := e.scalarOf(n, path)
	if err != nil {
		return err
	}
	if s.Kind == bootyaml.KindNull {
		e.buf = append(e.buf, "null"...)
		return nil
	}
	switch fd.Kind() {
	case protoreflect.BoolKind:
		switch {
		case s.Kind == bootyaml.KindBool:
			e.buf = append(e.buf, s.Text...)
		case s.Kind == bootyaml.KindString && s.Quoted && (s.Text == "true" || s.Text == "false"):
			e.buf = append(e.buf, s.Text...) // measured: Envoy takes a quoted "true"
		default:
			return e.fail(n, path, "want true or false, not %q", s.Text)
		}
	case protoreflect.StringKind:
		if s.Kind != bootyaml.KindString {
			return e.fail(n, path, "Envoy reads %s as a %s, not a string: quote it", s.Text, s.Kind)
		}
		e.str(s.Text)
	case protoreflect.BytesKind:
		if _, err := base64.StdEncoding.DecodeString(s.Text); s.Kind != bootyaml.KindString || err != nil {
			return e.fail(n, path, "want base64 (with padding)")
		}
		e.str(s.Text)
	case protoreflect.EnumKind:
		return e.enum(n, s, fd.Enum(), path)
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		switch {
		case s.Kind == bootyaml.KindNumber:
			e.buf = append(e.buf, s.Text...)
		case s.Kind == bootyaml.KindString && (jsonNumber().MatchString(s.Text) || s.Text == "NaN" || s.Text == "Infinity" || s.Text == "-Infinity"):
			e.str(s.Text)
		default:
			return e.fail(n, path, "want a number written as JSON writes one, not %q", s.Text)
		}
	default: // the integers
		switch {
		case s.Kind == bootyaml.KindNumber:
			e.buf = append(e.buf, s.Text...)
		case s.Kind == bootyaml.KindString && isDecimal(s.Text):
			e.str(s.Text)
		default:
			return e.fail(n, path, "want an integer, not %q", s.Text)
		}
	}
	return nil
}

func isDecimal(s string) bool {
	_, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		_, err = strconv.ParseUint(s, 10, 64)
	}
	return err == nil && !strings.HasPrefix(s, "+")
}

// enum writes an enum's value: a name (Envoy's parser, with
// case_insensitive_enum_parsing, takes it in any case: it is written in
// upper case) or a number.
func (e *encoder) enum(n *yaml.Node, s bootyaml.Scalar, ed protoreflect.EnumDescriptor, path string) error {
	if ed.FullName() == "google.protobuf.NullValue" {
		return e.fail(n, path, "want null")
	}
	switch s.Kind {
	case bootyaml.KindNumber:
		e.buf = append(e.buf, s.Text...)
		return nil
	case bootyaml.KindString:
		if ed.Values().ByName(protoreflect.Name(s.Text)) != nil {
			e.str(s.Text)
			return nil
		}
		if up := strings.ToUpper(s.Text); ed.Values().ByName(protoreflect.Name(up)) != nil {
			e.str(up)
			return nil
		}
	}
	return e.fail(n, path, "no value %q in %s", s.Text, ed.FullName())
}

// value writes n as a google.protobuf.Value: Envoy's reading of each
// scalar, whatever field it is under.
func (e *encoder) value(n *yaml.Node, path string, depth int) error {
	if err := e.plain(n, path, depth); err != nil {
		return err
	}
	switch n.Kind {
	case yaml.MappingNode:
		e.buf = append(e.buf, '{')
		first := true
		err := e.pairs(n, path, depth, func(key string, _, v *yaml.Node) error {
			if !first {
				e.buf = append(e.buf, ',')
			}
			first = false
			e.str(key)
			e.buf = append(e.buf, ':')
			return e.value(v, join(path, key), depth+1)
		})
		e.buf = append(e.buf, '}')
		return err
	case yaml.SequenceNode:
		e.buf = append(e.buf, '[')
		for i, c := range n.Content {
			if i > 0 {
				e.buf = append(e.buf, ',')
			}
			if err := e.value(c, fmt.Sprintf("%s[%d]", path, i), depth+1); err != nil {
				return err
			}
		}
		e.buf = append(e.buf, ']')
		return nil
	case yaml.ScalarNode:
		s := bootyaml.ReadScalar(n)
		switch s.Kind {
		case bootyaml.KindNull:
			e.buf = append(e.buf, "null"...)
		case bootyaml.KindString:
			e.str(s.Text)
		default:
			e.buf = append(e.buf, s.Text...)
		}
		return nil
	}
	return e.fail(n, path, "not a YAML value")
}
