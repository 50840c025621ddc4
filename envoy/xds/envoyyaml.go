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

package xds

import (
	"math"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// scalarKind is what Envoy makes of a YAML scalar.
type scalarKind int

const (
	kindNull scalarKind = iota
	kindBool
	kindNumber // an integer that fits in 32 bits: a JSON number
	kindString
)

// scalar is a YAML scalar as Envoy reads it: its kind and its JSON text (a
// string's is its value, unquoted).
type scalar struct {
	kind scalarKind
	text string
	// quoted is set for a string written quoted or as a block.
	quoted bool
}

var (
	decimalInt = regexp.MustCompile(`^[+-]?[1-9][0-9]*$`)
	octalInt   = regexp.MustCompile(`^[+-]?0[0-7]*$`)
	hexInt     = regexp.MustCompile(`^[+-]?0[xX][0-9a-fA-F]+$`)
)

// readScalar reads the plain or quoted scalar n as Envoy does. n has no
// tag of its own (the caller refuses those: Envoy reads a !!str 123 as a
// number).
func readScalar(n *yaml.Node) scalar {
	if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		return scalar{kind: kindString, text: n.Value, quoted: true}
	}
	v := n.Value
	switch v {
	case "", "~", "null", "Null", "NULL":
		return scalar{kind: kindNull}
	}
	if b, ok := envoyBool(v); ok {
		return scalar{kind: kindBool, text: strconv.FormatBool(b)}
	}
	if i, ok := envoyInt(v); ok {
		if i >= math.MinInt32 && i <= math.MaxInt32 {
			return scalar{kind: kindNumber, text: strconv.FormatInt(i, 10)}
		}
		return scalar{kind: kindString, text: strconv.FormatInt(i, 10)}
	}
	return scalar{kind: kindString, text: v}
}

// envoyBool is yaml-cpp's bool: y, yes, true, on and their negations, all
// lower case, all upper case, or with only the first letter upper.
func envoyBool(v string) (value, ok bool) {
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
	if v != "" && (v[0] == '+' || v[0] == '-') {
		sign, digits = v[:1], v[1:]
	}
	base := 0
	switch {
	case hexInt.MatchString(v):
		base, digits = 16, digits[2:]
	case octalInt.MatchString(v):
		base = 8
	case decimalInt.MatchString(v):
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
