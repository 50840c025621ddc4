package xds

import (
	"crypto/sha256"
	"errors"
	"fmt"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/envoy-agent/envoy-agent/envoy/xds/ads"
	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
)

// The types this package shares with the packages that run Envoy (package
// ads, which links no protobuf).
type (
	// Type is a resource type served over ADS, as its type URL.
	Type = ads.Type
	// Resource is one resource converted: its name, type and protobuf bytes.
	Resource = ads.Resource
	// Outcome is what an epoch's Envoy did with a change.
	Outcome = ads.Outcome
	// RejectedError is a change Envoy refused (a NACK), with its reason.
	RejectedError = ads.RejectedError
	// TypeStatus, StreamStatus and EpochStatus are what Status says.
	TypeStatus   = ads.TypeStatus
	StreamStatus = ads.StreamStatus
	EpochStatus  = ads.EpochStatus
)

// The types served over ADS.
const (
	RouteType  = ads.RouteType
	SecretType = ads.SecretType
)

// ConvertError is a resource that could not be converted: the caller can
// serve it another way (a file, or a bootstrap Envoy parses itself). It
// never holds the resource's content beyond the offending field's name and
// a scalar Envoy would not take as such.
type ConvertError struct {
	Type Type
	Err  error
}

func (e *ConvertError) Error() string { return "convert " + e.Type.Noun() + ": " + e.Err.Error() }

func (e *ConvertError) Unwrap() error { return e.Err }

// Convert converts the YAML node n (a mapping, or a document holding one)
// into a resource of type t, reading each scalar as Envoy's YAML loader
// reads it, or fails with a *ConvertError: for an unknown field or type, a
// value that does not fit its field, and anything Go's protobuf JSON parser
// and Envoy's could read differently (see tojson.go). An "@type" key, when
// present, must be t.
func Convert(t Type, n *yaml.Node) (Resource, error) {
	if n != nil && n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	if n == nil || n.Kind != yaml.MappingNode {
		return Resource{}, &ConvertError{Type: t, Err: errors.New("not a mapping")}
	}
	body := n
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "@type" {
			if n.Content[i+1].Value != string(t) {
				return Resource{}, &ConvertError{Type: t, Err: fmt.Errorf("line %d: @type is %q", n.Content[i+1].Line, n.Content[i+1].Value)}
			}
			c := *n
			c.Content = append(append([]*yaml.Node{}, n.Content[:i]...), n.Content[i+2:]...)
			body = &c
			break
		}
	}
	r, err := theRegistry()
	if err != nil {
		return Resource{}, &ConvertError{Type: t, Err: err}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	mt, err := r.FindMessageByURL(string(t))
	if err != nil {
		return Resource{}, &ConvertError{Type: t, Err: fmt.Errorf("type %s: %w", t, err)}
	}
	e := encoder{res: r}
	if err := e.message(body, mt.Descriptor(), "", 0); err != nil {
		return Resource{}, &ConvertError{Type: t, Err: err}
	}
	m := mt.New().Interface()
	if err := (protojson.UnmarshalOptions{Resolver: r}).Unmarshal(e.buf, m); err != nil {
		return Resource{}, &ConvertError{Type: t, Err: err}
	}
	out, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return Resource{}, &ConvertError{Type: t, Err: err}
	}
	name := m.ProtoReflect().Get(mt.Descriptor().Fields().ByName("name")).String()
	if name == "" {
		return Resource{}, &ConvertError{Type: t, Err: errors.New("no name")}
	}
	return Resource{Name: name, Type: t, Body: out, Sum: sha256.Sum256(out)}, nil
}

// ConvertYAML is Convert of a resource given as YAML text, parsed within
// the bounds of internal/bootyaml (size, tokens, aliases).
func ConvertYAML(t Type, data []byte) (Resource, error) {
	var doc yaml.Node
	if err := bootyaml.Decode(data, &doc); err != nil {
		return Resource{}, &ConvertError{Type: t, Err: err}
	}
	return Convert(t, &doc)
}
