package bootyaml

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// sameReading reports where a and b differ as Envoy reads them (kinds,
// keys' text, ReadScalar of each value), "" when they do not.
func sameReading(a, b *yaml.Node, path string, key bool) string {
	if a.Kind == yaml.DocumentNode && b.Kind == yaml.DocumentNode {
		return sameReading(a.Content[0], b.Content[0], path, false)
	}
	if a.Kind != b.Kind || len(a.Content) != len(b.Content) {
		return path + ": kind or length"
	}
	if a.Kind == yaml.ScalarNode {
		if key {
			if a.Value != b.Value {
				return path + ": key " + a.Value + " became " + b.Value
			}
			return ""
		}
		if ra, rb := ReadScalar(a), ReadScalar(b); ra.Kind != rb.Kind || ra.Text != rb.Text {
			return path + ": " + ra.Kind.String() + " " + ra.Text + " became " + rb.Kind.String() + " " + rb.Text
		}
	}
	for i := range a.Content {
		if d := sameReading(a.Content[i], b.Content[i], path+"/"+a.Content[i&^1].Value, a.Kind == yaml.MappingNode && i%2 == 0); d != "" {
			return d
		}
	}
	return ""
}

// roundTrip encodes the YAML text as a file called name and decodes it
// back: the tree it came from, the text written and the tree read.
func roundTrip(t *testing.T, text, name string) (in *yaml.Node, out string, back *yaml.Node) {
	t.Helper()
	in = &yaml.Node{}
	if err := Decode([]byte(text), in); err != nil {
		t.Fatal(err)
	}
	data, err := Encode(in, name)
	if err != nil {
		t.Fatal(err)
	}
	back = &yaml.Node{}
	if err := Decode(data, back); err != nil {
		t.Fatalf("the text written does not decode: %v\n%s", err, data)
	}
	return in, string(data), back
}

// TestFlowReadsAsEnvoy: the flow style holds what Envoy reads in the
// YAML it came from, scalar by scalar, and reads back to the same.
func TestFlowReadsAsEnvoy(t *testing.T) {
	for _, tt := range []struct {
		name, in string
		contains []string // in the flow text
	}{
		{"bools as Envoy reads them", "a: yes\nb: On\nc: n\nd: 'yes'\ne: yEs\nf: true\n",
			[]string{`"a": true`, `"b": true`, `"c": false`, `"d": "yes"`, `"e": "yEs"`, `"f": true`}},
		{"integers", "a: 017\nb: 0x1F\nc: 08\nd: 2147483648\ne: -5\nf: +5\n",
			[]string{`"a": 15`, `"b": 31`, `"c": "08"`, `"d": "2147483648"`, `"e": -5`, `"f": 5`}},
		{"floats and nulls", "a: 1.5\nb: .inf\nc: ~\nd:\ne: null\nf: 1e3\n",
			[]string{`"a": "1.5"`, `"b": ".inf"`, `"c": null`, `"d": null`, `"e": null`, `"f": "1e3"`}},
		{"strings that need quoting", "\"@type\": type.googleapis.com/x\n'a: b': \"tab\\tquote\\\" back\\\\ \\u2028 \\x01 é\"\n\"#k\": '[x], {y}'\n",
			[]string{`"@type": "type.googleapis.com/x"`, `"a: b": "tab\tquote\" back\\ \u2028 \x01 é"`, `"#k": "[x], {y}"`}},
		{"blocks", "a: |\n  line one\n  line two\nb: >\n  folded\n  text\n",
			[]string{`"a": "line one\nline two\n"`, `"b": "folded text\n"`}},
		{"empty and nested", "a: {}\nb: []\nc: [[1, [2, {d: [e]}]]]\n",
			[]string{`"a": {}`, `"b": []`, `[2, {"d": ["e"]}]`}},
		{"a key that reads as a bool stays its text", "yes: 1\n'on': 2\n", []string{`"yes": 1`, `"on": 2`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in, out, back := roundTrip(t, tt.in, "envoy.yaml")
			if !strings.HasPrefix(out, "{\n") {
				t.Fatalf("not the flow style:\n%s", out)
			}
			if d := sameReading(in, back, "", false); d != "" {
				t.Errorf("%s\n%s", d, out)
			}
			for _, s := range tt.contains {
				if !strings.Contains(out, s) {
					t.Errorf("lacks %s:\n%s", s, out)
				}
			}
		})
	}
}

// TestFlowLeavesWhatItCannotRead: a tree with what ReadScalar does not
// read is written by yaml's emitter, as it was.
func TestFlowLeavesWhatItCannotRead(t *testing.T) {
	for _, in := range []string{
		"a: &x {b: 1}\nc: *x\n",
		"a: !!str 123\n",
		"a: !custom x\n",
		"base: &b {x: 1}\nm: {<<: *b, y: 2}\n",
		"? [a, b]\n: c\n",
	} {
		_, out, back := roundTrip(t, in, "envoy.yaml")
		if strings.HasPrefix(out, "{") {
			t.Errorf("%q was written in the flow style:\n%s", in, out)
		}
		var want yaml.Node
		if err := yaml.Unmarshal([]byte(in), &want); err != nil {
			t.Fatal(err)
		}
		if d := sameReading(&want, back, "", false); d != "" {
			t.Errorf("%q: %s\n%s", in, d, out)
		}
	}
}

// TestFlowOfRealBootstraps: the bootstraps written the way Envoy's own
// examples are (test/corpus, templates whose fields, ports and names, are
// a number here) read back as Envoy reads them.
func TestFlowOfRealBootstraps(t *testing.T) {
	templateField := regexp.MustCompile(`{{[^}]*}}`)
	files, err := filepath.Glob("../../test/corpus/testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		in, out, back := roundTrip(t, templateField.ReplaceAllString(string(data), "10000"), "envoy.yaml")
		if !strings.HasPrefix(out, "{\n") {
			t.Errorf("%s: not the flow style", f)
		}
		if d := sameReading(in, back, "", false); d != "" {
			t.Errorf("%s: %s", f, d)
		}
	}
}
