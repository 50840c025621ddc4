package bootyaml

import (
	"bytes"
	"sync"

	"go.yaml.in/yaml/v3"
)

// Decoded is a bootstrap as a caller read and decoded it, for the next
// step that decodes the same file to take instead: a start then decodes
// the operator's file once, for its checks and for the copy Envoy runs
// (42 ms of a start at 1,000 TLS filter chains).
type Decoded struct {
	mu   sync.Mutex
	data []byte
	doc  *yaml.Node
}

// NewDecoded holds doc, decoded from data; the step that takes it changes
// it.
func NewDecoded(data []byte, doc *yaml.Node) *Decoded {
	return &Decoded{data: data, doc: doc}
}

// Take returns the tree once, and only for data, the bytes it was decoded
// from (the file may have been written since); nil otherwise, and for a
// nil d. Either way d then holds nothing.
func (d *Decoded) Take(data []byte) *yaml.Node {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	doc, same := d.doc, bytes.Equal(d.data, data)
	d.data, d.doc = nil, nil
	if !same {
		return nil
	}
	return doc
}
