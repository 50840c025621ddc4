package bootyaml

import (
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestDecodedTakenOnce: the tree goes to the first Take of the very bytes
// it was decoded from, and to nothing after.
func TestDecodedTakenOnce(t *testing.T) {
	data := []byte("admin: {}\n")
	var doc yaml.Node
	if err := Decode(data, &doc); err != nil {
		t.Fatal(err)
	}
	d := NewDecoded(data, &doc)
	if got := d.Take([]byte("admin: {}\nnode: {}\n")); got != nil {
		t.Fatal("taken for other bytes (the file written since)")
	}
	if got := d.Take(data); got != nil {
		t.Fatal("taken after a Take for other bytes")
	}
	d = NewDecoded(data, &doc)
	if got := d.Take(data); got != &doc {
		t.Fatal("not taken for its own bytes")
	}
	if got := d.Take(data); got != nil {
		t.Fatal("taken twice")
	}
	if got := (*Decoded)(nil).Take(data); got != nil {
		t.Fatal("a nil Decoded gave a tree")
	}
}
