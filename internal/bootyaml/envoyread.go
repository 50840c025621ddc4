// How Envoy reads a YAML scalar. Envoy's loader (yaml-cpp, then
// parseYamlNode in source/common/protobuf/yaml_utility.cc) turns YAML into a
// JSON value before protobuf's JSON parser sees it, and it decides what a
// scalar is without looking at the field it goes to. Measured on Envoy
// 1.40.0 (a route configuration's metadata, read back from config_dump):
// a quoted or block scalar is a string; a plain y, n, yes, no, on, off,
// true or false in lower, upper or title case is a bool (yEs is a string);
// a plain integer is a number when it fits in 32 bits and its decimal
// string when it needs 64, read with C++'s automatic base (0x1F is 31, 017
// is 15, 08 and 0o17 stay strings); every other plain scalar is a string,
// floats included (1.5, 1e3, .inf: this build's yaml-cpp reads none of them
// as a number). yaml.v3 reads the same text otherwise (yes is a string, 017
// the number 17), so the agent reads it as Envoy does here.

package bootyaml

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// Kind is what Envoy makes of a YAML scalar.
type Kind int

// The kinds of scalar Envoy reads.
const (
	KindNull Kind = iota
	KindBool
	KindNumber // an integer that fits in 32 bits: a JSON number
	KindString
)

// String names the kind as an error message does.
func (k Kind) String() string {
	switch k {
	case KindBool:
		return "bool"
	case KindNumber:
		return "number"
	case KindNull:
		return "null"
	}
	return "string"
}

// Scalar is a YAML scalar as Envoy reads it: its kind and its JSON text (a
// string's is its value, unquoted).
type Scalar struct {
	Kind Kind
	Text string
	// Quoted is set for a string written quoted or as a block.
	Quoted bool
}

// The integers' forms, compiled at the first scalar that starts like a
// number (not at every exec of the agent).
var intForms = sync.OnceValue(func() (f struct{ decimal, octal, hex *regexp.Regexp }) {
	f.decimal = regexp.MustCompile(`^[+-]?[1-9][0-9]*$`)
	f.octal = regexp.MustCompile(`^[+-]?0[0-7]*$`)
	f.hex = regexp.MustCompile(`^[+-]?0[xX][0-9a-fA-F]+$`)
	return f
})

// ReadScalar reads the plain or quoted scalar n as Envoy does. n has no
// tag of its own (the caller refuses those: Envoy reads a !!str 123 as a
// number).
func ReadScalar(n *yaml.Node) Scalar {
	if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		return Scalar{Kind: KindString, Text: n.Value, Quoted: true}
	}
	v := n.Value
	switch v {
	case "", "~", "null", "Null", "NULL":
		return Scalar{Kind: KindNull}
	}
	if b, ok := envoyBool(v); ok {
		return Scalar{Kind: KindBool, Text: strconv.FormatBool(b)}
	}
	if i, ok := envoyInt(v); ok {
		if i >= math.MinInt32 && i <= math.MaxInt32 {
			return Scalar{Kind: KindNumber, Text: strconv.FormatInt(i, 10)}
		}
		return Scalar{Kind: KindString, Text: strconv.FormatInt(i, 10)}
	}
	return Scalar{Kind: KindString, Text: v}
}

// envoyBool is yaml-cpp's bool: y, yes, true, on and their negations, all
// lower case, all upper case, or with only the first letter upper.
func envoyBool(v string) (value, ok bool) {
	if len(v) > 5 || !strings.ContainsRune("yYnNtTfFoO", rune(v[0])) {
		return false, false // not one of them: the quick way out, for every name
	}
	if v != strings.ToLower(v) && v != strings.ToUpper(v) && v != strings.ToUpper(v[:1])+strings.ToLower(v[1:]) {
		return false, false
	}
	switch strings.ToLower(v) {
	case "y", "yes", "true", "on":
		return true, true
	case "n", "no", "false", "off":
		return false, true
	}
	return false, false
}

// envoyInt is yaml-cpp's int64: a whole string that C++'s stream reads
// with its base from the prefix (0x hexadecimal, 0 octal), a sign allowed;
// one that overflows is not an integer.
func envoyInt(v string) (int64, bool) {
	sign, digits := "", v
	if v[0] == '+' || v[0] == '-' {
		sign, digits = v[:1], v[1:]
	}
	if digits == "" || digits[0] < '0' || digits[0] > '9' {
		return 0, false // not a number: the quick way out, for every name
	}
	base, forms := 0, intForms()
	switch {
	case forms.hex.MatchString(v):
		base, digits = 16, digits[2:]
	case forms.octal.MatchString(v):
		base = 8
	case forms.decimal.MatchString(v):
		base = 10
	default:
		return 0, false
	}
	if sign == "+" {
		sign = ""
	}
	i, err := strconv.ParseInt(sign+digits, base, 64)
	return i, err == nil
}
