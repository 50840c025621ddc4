//go:build linux

package output

import (
	"io"
	"strings"
	"testing"
)

// TestRedactWriter: Envoy's output as the real Envoy 1.40 prints it for a
// bootstrap it rejects (shapes copied from its output), relayed through the
// writer in uneven pieces.
func TestRedactWriter(t *testing.T) {
	tests := []struct {
		name, in string
		keep     []string
	}{
		{"json dump on one line",
			`[2026-12-03 09:06:11.892][1][critical][main] [source/server/server.cc:449] error initializing configuration 'x.yaml': Unable to parse JSON as proto (INVALID_ARGUMENT: invalid JSON @ admin.address.socket_address.port_value: uint32, near 1:53 (offset 52): invalid number: 'tenthousand'): {"static_resources":{"clusters":[{"private_key":{"inline_string":"s3cret"}}]}}` + "\n",
			[]string{"port_value", "invalid number", redactedDump}},
		{"proto text dump over lines",
			"[t][1][critical][main] [source/server/server.cc:449] error initializing configuration 'x.yaml': goo.gle/debugstr\nstatic_resources {\n  clusters {\n    inline_string: \"s3cret\"\n  }\n}\n: Proto constraint validation failed (x)\n",
			[]string{"error initializing configuration", "Proto constraint validation failed (x)", redactedDump}},
		{"json log format",
			`{"level":"critical","msg":"error initializing configuration 'x.yaml': goo.gle/debugstr\nstatic_resources {\n  clusters {\n    inline_string: \"s3cret\"\n  }\n}\n: Proto constraint validation failed (x)"}` + "\n",
			[]string{`"level":"critical"`, "Proto constraint validation failed (x)"}},
		{"pem block", "[t][1][error][x] key -----BEGIN PRIVATE KEY-----\\ns3cret\\n-----END PRIVATE KEY----- end\n",
			[]string{"<PEM block left out> end"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			rel := NewRelay(io.Discard, &out)
			w := rel.Stderr()
			for b := []byte(tt.in); len(b) > 0; {
				n := min(len(b), 7)
				if _, err := w.Write(b[:n]); err != nil {
					t.Fatal(err)
				}
				b = b[n:]
			}
			rel.Flush()
			got := out.String()
			if strings.Contains(got, "s3cret") || strings.Contains(got, "static_resources") {
				t.Fatalf("the dump survived:\n%s", got)
			}
			for _, k := range tt.keep {
				if !strings.Contains(got, k) {
					t.Errorf("lost %q:\n%s", k, got)
				}
			}
		})
	}
}

// TestRedactWriterBoundsALine: of a runaway line on stderr, only the first
// maxLine bytes go on.
func TestRedactWriterBoundsALine(t *testing.T) {
	var out strings.Builder
	_, _ = NewRelay(io.Discard, &out).Stderr().Write([]byte(strings.Repeat("x", 3*maxLine) + "\nnext\n"))
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 2 || len(lines[0]) > maxLine+3 || lines[1] != "next" {
		t.Fatalf("got %d lines, the first %d bytes", len(lines), len(lines[0]))
	}
}

func TestRedactDropsTheBootstrap(t *testing.T) {
	in := []string{
		"[2026-12-02 18:28:00.937][1][critical][main] [source/server/server.cc:449] error initializing configuration 'x.yaml': goo.gle/debugonly",
		"static_resources {",
		"  clusters {",
		`    name: "c"`,
		`    inline_string: "s3cret"`,
		"  }",
		"}",
		": Proto constraint validation failed (x)",
		"cannot bind '127.0.0.1:1': Address already in use",
	}
	got := strings.Join(Redact(in), "|")
	if strings.Contains(got, "s3cret") || strings.Contains(got, "static_resources") {
		t.Fatalf("the dump survived: %q", got)
	}
	for _, keep := range []string{"[critical]", "Proto constraint validation failed", "Address already in use"} {
		if !strings.Contains(got, keep) {
			t.Errorf("lost %q: %q", keep, got)
		}
	}
}
