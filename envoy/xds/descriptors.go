package xds

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"fmt"
	"io"
	"strings"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// descriptorSet is the gzipped FileDescriptorSet of every protobuf file of
// go-control-plane's envoy module at Envoy's release (./protoset writes it,
// and its test fails when it is not current).
//
//go:embed descriptors.pb.gz
var descriptorSet []byte

// registry builds message types from descriptorSet lazily: only the files a
// conversion needs, with their imports. Building all of them took about
// 35 ms and 10 MB of heap, once per process; a route configuration needs a
// tenth of the files. Its methods are called with mu held (dynamicpb.Types
// may not be used while its Files change).
type registry struct {
	mu     sync.Mutex
	raw    map[string][]byte                // a file's FileDescriptorProto, by path
	symbol map[protoreflect.FullName]string // a message's or enum's full name: its file's path
	files  *protoregistry.Files
	types  *dynamicpb.Types
}

// theRegistry is the process's registry, indexed from descriptorSet at its
// first use. The index reads only the names of each file (its path,
// package, messages and enums) from the wire: unmarshalling all 725 files
// took 13 ms of the 17 ms this took, and a conversion needs a tenth of
// them.
var theRegistry = sync.OnceValues(func() (*registry, error) {
	zr, err := gzip.NewReader(bytes.NewReader(descriptorSet))
	if err != nil {
		return nil, fmt.Errorf("descriptors: %w", err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("descriptors: %w", err)
	}
	r := &registry{raw: map[string][]byte{}, symbol: map[protoreflect.FullName]string{}, files: new(protoregistry.Files)}
	r.types = dynamicpb.NewTypes(r.files)
	err = fields(raw, func(num protowire.Number, file []byte) error {
		if num != fileField {
			return nil
		}
		var path, pkg string
		var names []string
		err := fields(file, func(num protowire.Number, v []byte) error {
			switch num {
			case fileName:
				path = string(v)
			case filePackage:
				pkg = string(v)
			case fileMessage:
				return messageNames("", v, &names)
			case fileEnum:
				return fields(v, func(num protowire.Number, v []byte) error {
					if num == typeName {
						names = append(names, string(v))
					}
					return nil
				})
			}
			return nil
		})
		if err != nil {
			return err
		}
		r.raw[path] = file
		for _, n := range names {
			if pkg != "" {
				n = pkg + "." + n
			}
			r.symbol[protoreflect.FullName(n)] = path
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("descriptors: %w", err)
	}
	return r, nil
})

// Field numbers of descriptor.proto that the index reads: FileDescriptorSet
// .file; FileDescriptorProto .name, .package, .message_type, .enum_type;
// DescriptorProto .name, .nested_type, .enum_type (EnumDescriptorProto's
// name is field 1 too).
const (
	fileField     protowire.Number = 1
	fileName      protowire.Number = 1
	filePackage   protowire.Number = 2
	fileMessage   protowire.Number = 4
	fileEnum      protowire.Number = 5
	typeName      protowire.Number = 1
	messageNested protowire.Number = 3
	messageEnum   protowire.Number = 4
)

// fields calls f with each length-delimited field of the message b (the
// others are skipped).
func fields(b []byte, f func(protowire.Number, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := f(num, v); err != nil {
			return err
		}
	}
	return nil
}

// messageNames adds the full names (under prefix) of the message m, its
// nested messages and its enums to names.
func messageNames(prefix string, m []byte, names *[]string) error {
	var name string
	var nested, enums [][]byte
	if err := fields(m, func(num protowire.Number, v []byte) error {
		switch num {
		case typeName:
			name = prefix + string(v)
		case messageNested:
			nested = append(nested, v)
		case messageEnum:
			enums = append(enums, v)
		}
		return nil
	}); err != nil {
		return err
	}
	*names = append(*names, name)
	for _, n := range nested {
		if err := messageNames(name+".", n, names); err != nil {
			return err
		}
	}
	for _, e := range enums {
		if err := fields(e, func(num protowire.Number, v []byte) error {
			if num == typeName {
				*names = append(*names, name+"."+string(v))
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// ensure builds the file at path, and first every file it imports.
func (r *registry) ensure(path string) error {
	if _, err := r.files.FindFileByPath(path); err == nil {
		return nil
	}
	b, ok := r.raw[path]
	if !ok {
		return fmt.Errorf("descriptors: no file %s", path)
	}
	fp := new(descriptorpb.FileDescriptorProto)
	if err := proto.Unmarshal(b, fp); err != nil {
		return fmt.Errorf("descriptors: %s: %w", path, err)
	}
	for _, dep := range fp.Dependency {
		if err := r.ensure(dep); err != nil {
			return err
		}
	}
	fd, err := protodesc.NewFile(fp, r.files)
	if err != nil {
		return fmt.Errorf("descriptors: %s: %w", path, err)
	}
	return r.files.RegisterFile(fd)
}

// FindMessageByName finds a message type, building its file first.
func (r *registry) FindMessageByName(name protoreflect.FullName) (protoreflect.MessageType, error) {
	path, ok := r.symbol[name]
	if !ok {
		return nil, protoregistry.NotFound
	}
	if err := r.ensure(path); err != nil {
		return nil, err
	}
	return r.types.FindMessageByName(name)
}

// FindMessageByURL finds a message type by an Any's type URL.
func (r *registry) FindMessageByURL(url string) (protoreflect.MessageType, error) {
	name := url
	if i := strings.LastIndexByte(url, '/'); i >= 0 {
		name = url[i+1:]
	}
	return r.FindMessageByName(protoreflect.FullName(name))
}

// FindExtensionByName and FindExtensionByNumber find nothing: Envoy's
// resources use no extension fields.
func (r *registry) FindExtensionByName(protoreflect.FullName) (protoreflect.ExtensionType, error) {
	return nil, protoregistry.NotFound
}

// FindExtensionByNumber finds nothing (see FindExtensionByName).
func (r *registry) FindExtensionByNumber(protoreflect.FullName, protoreflect.FieldNumber) (protoreflect.ExtensionType, error) {
	return nil, protoregistry.NotFound
}
