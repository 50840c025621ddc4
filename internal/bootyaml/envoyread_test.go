package bootyaml

import (
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestReadScalar is Envoy 1.40.0's reading of plain scalars, as measured
// (envoy/xds's TestConvertMatchesEnvoy checks it against a real Envoy).
func TestReadScalar(t *testing.T) {
	for _, c := range []struct {
		in   string
		kind Kind
		text string
	}{
		{"yes", KindBool, "true"}, {"Yes", KindBool, "true"}, {"YES", KindBool, "true"}, {"yEs", KindString, "yEs"},
		{"n", KindBool, "false"}, {"Off", KindBool, "false"}, {"TRUE", KindBool, "true"},
		{"017", KindNumber, "15"}, {"-017", KindNumber, "-15"}, {"08", KindString, "08"}, {"00", KindNumber, "0"},
		{"0x1F", KindNumber, "31"}, {"-0x10", KindNumber, "-16"}, {"0x", KindString, "0x"}, {"0o17", KindString, "0o17"},
		{"+5", KindNumber, "5"}, {"-0", KindNumber, "0"}, {"2147483647", KindNumber, "2147483647"},
		{"2147483648", KindString, "2147483648"}, {"-2147483649", KindString, "-2147483649"},
		{"0x100000000", KindString, "4294967296"}, {"9223372036854775808", KindString, "9223372036854775808"},
		{"1.5", KindString, "1.5"}, {"1e3", KindString, "1e3"}, {".inf", KindString, ".inf"}, {"1_000", KindString, "1_000"},
		{"~", KindNull, ""}, {"null", KindNull, ""}, {"", KindNull, ""}, {"nul", KindString, "nul"},
	} {
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte("v: "+c.in), &doc); err != nil {
			t.Fatal(err)
		}
		got := ReadScalar(doc.Content[0].Content[1])
		if got.Kind != c.kind || got.Text != c.text {
			t.Errorf("%q: got %s %q, want %s %q", c.in, got.Kind, got.Text, c.kind, c.text)
		}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte("v: 'yes'"), &doc); err != nil {
		t.Fatal(err)
	}
	if got := ReadScalar(doc.Content[0].Content[1]); got.Kind != KindString || !got.Quoted {
		t.Errorf("a quoted yes: %+v", got)
	}
}
