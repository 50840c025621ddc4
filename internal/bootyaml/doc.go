// Package bootyaml decodes an Envoy bootstrap (YAML, or JSON, which is
// YAML) within bounded memory and time. go.yaml.in/yaml/v3 builds a node
// for every scalar, sequence and mapping before it decodes any, at up to
// about 190 bytes of memory per byte of input ("{?,?,?…}": 772 MB for a
// 4 MB file), and it expands aliases when it decodes into a generic tree
// (a 190 KB file of aliases to one large mapping took 6.5 s of CPU before
// yaml gave up). Every parse of a bootstrap in the agent goes through
// Decode, which counts the input's tokens before the parser sees it and
// the nodes its aliases expand to before decoding.
//
// The decoded tree is read and changed with the helpers of tree.go (Value,
// Set, Del, Str, Mapping, Encode...), which every step of the agent's
// rewrite of a bootstrap shares: a field is found in either of the
// spellings Envoy takes (stat_prefix, statPrefix), and a string the agent
// writes is double-quoted.
package bootyaml
