package bootyaml

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestSameField(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want bool
	}{
		{"tls_certificates", "tlsCertificates", true},
		{"stat_prefix", "stat_prefix", true},
		{"statPrefix", "STAT_PREFIX", true},
		{"stat_prefix", "stat_prefixes", false},
		{"name", "", false},
		{"", "_", true},
		{"@type", "@type", true},
		{"route_config", "rds", false},
	} {
		if got := SameField(tt.a, tt.b); got != tt.want {
			t.Errorf("SameField(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
	same := false
	if n := testing.AllocsPerRun(100, func() { same = SameField("validation_context_sds_secret_config", "validationContextSdsSecretConfig") }); n != 0 || !same {
		t.Errorf("SameField allocates %v times (same: %v)", n, same)
	}
}

// TestEditKeepsTheOperatorsSpelling: Value, Set and Del find a field in
// either spelling; Set keeps the key the operator wrote; what the agent
// adds is a string.
func TestEditKeepsTheOperatorsSpelling(t *testing.T) {
	var doc yaml.Node
	if err := Decode([]byte("# kept\nstaticResources: {a: 1}\nnode: {id: n}\nadmin: {}\n"), &doc); err != nil {
		t.Fatal(err)
	}
	root := Root(&doc)
	if v := Value(root, "static_resources"); v == nil || Text(Value(v, "a")) != "1" {
		t.Fatalf("Value(static_resources) = %v", v)
	}
	Set(root, "static_resources", Mapping("b", Str("n")))
	Set(root, "dynamic_resources", Mapping())
	Del(root, "admin")
	if Text(Value(root, "node")) != "" || Text(Value(Value(root, "node"), "id")) != "n" {
		t.Errorf("Text of a mapping is not empty, or of a scalar not its value")
	}
	out, err := Encode(&doc, "envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := "{\n  \"staticResources\": {\n    \"b\": \"n\"\n  },\n  \"node\": {\n    \"id\": false\n  },\n  \"dynamic_resources\": {}\n}\n" // a plain n is Envoy's false
	if string(out) != want {
		t.Errorf("Encode =\n%s\nwant\n%s", out, want)
	}
	js, err := Encode(&doc, "envoy.JSON")
	if err != nil || !strings.HasPrefix(string(js), "{") || !strings.Contains(string(js), `"staticResources":{"b":"n"}`) {
		t.Errorf("Encode as JSON = %s, %v", js, err)
	}
}

func TestRewritable(t *testing.T) {
	for name, want := range map[string]bool{"e.yaml": true, "e.YML": true, "e.json": true, "e.pb": false, "e.pb_text": false, "e": false} {
		if got := Rewritable(name); got != want {
			t.Errorf("Rewritable(%s) = %v", name, got)
		}
	}
}
