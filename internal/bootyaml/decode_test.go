package bootyaml

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// clusters is a bootstrap of n static clusters, as an operator writes one.
func clusters(n int) string {
	var b strings.Builder
	b.WriteString("admin:\n  address:\n    socket_address:\n      address: 127.0.0.1\n      port_value: 15000\nstatic_resources:\n  clusters:\n")
	for i := range n {
		fmt.Fprintf(&b, `  - name: cluster_%d
    connect_timeout: 1s
    type: STATIC
    load_assignment:
      cluster_name: cluster_%d
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address:
                address: 127.0.0.1
                port_value: %d
`, i, i, 10000+i)
	}
	return b.String()
}

// TestHostileYAMLIsRefusedInBoundedMemory: yaml.v3 spends up to about 190
// bytes a byte of input on nodes ("{?,?,…}" of 4 MB: 772 MB), compares
// every key of a mapping with every other (with equal keys, an error
// string a pair), and expands aliases when it decodes into a generic tree
// (190 KB of aliases to one mapping: 6.5 s of CPU). Each is refused, with a
// *LimitError, or decoded within bounds, in a child under a 1 GiB data
// limit; bootstraps of 1,500 static clusters, and of 12,000 (just under
// MaxSize), still decode, into a struct and into a generic tree.
func TestHostileYAMLIsRefusedInBoundedMemory(t *testing.T) {
	if child, used := envoykit.UnderMemoryLimit(t, 1<<30); !child {
		if used.CPU > 10*time.Second {
			t.Fatalf("the refusals took %s of CPU", used.CPU)
		}
		return
	}
	rep := func(pre, s string, n int, post string) string { return pre + strings.Repeat(s, n) + post }
	keys := func(n int, f string) string {
		ks := make([]string, n)
		for i := range ks {
			ks[i] = fmt.Sprintf(f, i)
		}
		return strings.Join(ks, ",")
	}
	laughs := "a: &a [x,x,x,x,x,x,x,x,x]\n"
	for i, prev := 1, "a"; i < 12; i, prev = i+1, fmt.Sprintf("l%d", i) {
		laughs += fmt.Sprintf("l%d: &l%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat("*"+prev+",", 9), ","))
	}
	big := "big: &b {" + keys(20000, "k%d: v") + "}\n"
	tests := []struct {
		name, doc string
		limit     bool // a *LimitError, else yaml's own error
	}{
		{"empty keys in a flow mapping", rep("a: {", "?,", MaxSize/2-8, "}\n"), true},
		{"flow sequence", rep("a: [", "1,", MaxSize/2-8, "1]\n"), true},
		{"block sequence", rep("a:\n", "- 1\n", MaxSize/4-8, ""), true},
		{"empty flow sequences", rep("a: [", "[],", MaxSize/3-8, "1]\n"), true},
		{"wide mapping", "a: {" + keys(150000, "k%d") + "}\n", true},
		{"equal keys", rep("a:\n", "? \n", 5000, ""), false}, // yaml: 12.5 million error strings
		{"billion laughs", laughs, true},
		{"aliases of a large mapping", big + "r: [" + strings.TrimSuffix(strings.Repeat("*b,", 40000), ",") + "]\n", true},
		{"deep nesting", rep("a: ", "[", 20000, "") + strings.Repeat("]", 20000) + "\n", false},
		{"too large", "a: " + strings.Repeat("x", MaxSize) + "\n", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, v := range []any{&map[string]any{}, &struct {
				Admin map[string]any `yaml:"admin"`
			}{}} {
				err := Decode([]byte(tt.doc), v)
				var le *LimitError
				if err == nil || errors.As(err, &le) != tt.limit {
					t.Fatalf("Decode into %T = %v; want an error (a limit's: %v)", v, err, tt.limit)
				}
			}
		})
	}
	for _, n := range []int{1, 1500, 12000} {
		var tree map[string]any
		if err := Decode([]byte(clusters(n)), &tree); err != nil {
			t.Fatalf("%d clusters: %v", n, err)
		}
		cs := tree["static_resources"].(map[string]any)["clusters"].([]any)
		if len(cs) != n {
			t.Fatalf("%d clusters decoded as %d", n, len(cs))
		}
	}
	// Anchors and aliases within the bounds, the merge key among them.
	var doc struct {
		A map[string]any `yaml:"a"`
		B map[string]any `yaml:"b"`
	}
	if err := Decode([]byte("a: &x {k: 1, j: 2}\nb: {<<: *x, j: 3}\n"), &doc); err != nil || doc.B["k"] != 1 || doc.B["j"] != 3 {
		t.Fatalf("aliases: %v %v", doc, err)
	}
}

// TestReadFileNamesTheFile: ReadFile's errors name the file, and a file
// larger than MaxSize is not read.
func TestReadFileNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "envoy.yaml")
	if err := os.WriteFile(path, []byte("a: {?,?}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := ReadFile(path, &v); err == nil || !strings.HasPrefix(err.Error(), path+": ") || !strings.Contains(err.Error(), "already defined") {
		t.Fatalf("ReadFile = %v; want the file and the repeated key", err)
	}
	if err := os.Truncate(path, MaxSize+1); err != nil {
		t.Fatal(err)
	}
	if err := ReadFile(path, &v); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("ReadFile of %d bytes = %v", MaxSize+1, err)
	}
}
