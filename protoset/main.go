// Command protoset writes the protobuf descriptors that envoy/xds converts
// Envoy resources with: a FileDescriptorSet of every file that
// github.com/envoyproxy/go-control-plane/envoy (the version in go.mod, which
// follows Envoy's release) registers, with the files they import (xds,
// udpa, validate, googleapis, the well-known types), gzipped.
//
// It is a module of its own so that go-control-plane's generated types stay
// out of the agent's go.mod and binary: the agent embeds the set and builds
// message types from it at run time. `go run ./protoset` (from the
// repository's root) rewrites the file; TestSetCurrent fails when the
// checked-in file differs from what this command writes.
package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	_ "github.com/cncf/xds/go/udpa/type/v1" // TypedStruct, as the operator may write it
	_ "github.com/cncf/xds/go/xds/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// Output is the set's file, from the repository's root.
const Output = "envoy/xds/descriptors.pb.gz"

// Set is the gzipped FileDescriptorSet of every file registered in this
// program, sorted by path, with no time in its gzip header: the same
// go.mod always gives the same bytes.
func Set() ([]byte, error) {
	set := &descriptorpb.FileDescriptorSet{}
	protoregistry.GlobalFiles.RangeFiles(func(f protoreflect.FileDescriptor) bool {
		set.File = append(set.File, protodesc.ToFileDescriptorProto(f))
		return true
	})
	sort.Slice(set.File, func(i, j int) bool { return set.File[i].GetName() < set.File[j].GetName() })
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(set)
	if err != nil {
		return nil, err
	}
	var z bytes.Buffer
	w, err := gzip.NewWriterLevel(&z, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(raw); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return z.Bytes(), nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "protoset:", err)
		os.Exit(1)
	}
}

func run() error {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	data, err := Set()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(root, Output), data, 0o644)
}
