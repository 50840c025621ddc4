//go:build linux

package config

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidateWithRealEnvoy(t *testing.T) {
	dir, bin := configDir(t)
	bad := filepath.Join(dir, "rejected.yaml")
	// Valid YAML, admin where the agent expects it, but a listener port
	// Envoy's own proto validation rejects.
	if err := os.WriteFile(bad, []byte(`admin:
  address: {socket_address: {address: 127.0.0.1, port_value: 15000}}
static_resources:
  listeners:
  - name: x
    address: {socket_address: {address: 127.0.0.1, port_value: 99999}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Run("good", func(t *testing.T) {
		path := writeConfig(t, dir, "[envoy]\nbinary_path = \""+bin+"\"\nconfig_path = \"envoy.yaml\"\nadmin_port = 15000\n")
		var out bytes.Buffer
		if err := Validate(context.Background(), path, &out); err != nil {
			t.Fatalf("Validate: %v", err)
		}
		// A TCP admin: one warning, in plain words, then OK.
		if !strings.Contains(out.String(), "\nOK: "+path) || strings.Count(out.String(), "warning: ") != 1 ||
			!strings.Contains(out.String(), "Envoy's admin API is on TCP 127.0.0.1:15000, and every local user can reach it: read /config_dump") {
			t.Fatalf("output %q, want one warning about the TCP admin, then OK", out.String())
		}
	})
	t.Run("rejected by envoy", func(t *testing.T) {
		path := writeConfig(t, dir, "[envoy]\nbinary_path = \""+bin+"\"\nconfig_path = \"rejected.yaml\"\nadmin_port = 15000\n")
		var out bytes.Buffer
		err := Validate(context.Background(), path, &out)
		var ce *ConfigError
		if !errors.As(err, &ce) || len(ce.Problems) != 1 {
			t.Fatalf("Validate = %v, want one problem", err)
		}
		p := ce.Problems[0]
		if p.File != bad || !strings.Contains(p.Msg, "Envoy rejects this bootstrap") || !strings.Contains(p.Msg, "PortValue: value must be less than or equal to 65535") {
			t.Fatalf("problem %+v; want Envoy's own reason naming the bootstrap", p)
		}
		if out.Len() != 0 {
			t.Errorf("printed %q on failure", out.String())
		}
	})
	t.Run("bad toml stops before envoy", func(t *testing.T) {
		path := writeConfig(t, dir, "[envoy]\nbinary_path = \""+bin+"\"\nconfig_path = \"rejected.yaml\"\nadmin_port = \"x\"\n")
		err := Validate(context.Background(), path, &bytes.Buffer{})
		if err == nil || strings.Contains(err.Error(), "Envoy rejects") || !strings.Contains(err.Error(), ":4: envoy.admin_port") {
			t.Fatalf("Validate = %v, want the TOML problem alone", err)
		}
	})
}

func TestEnvoyComplaint(t *testing.T) {
	tests := []struct{ name, out, want string }{
		{"proto dump between", "[2026-12-02 18:28:00.937][19736][critical][main] [source/server/config_validation/server.cc:76] error initializing configuration 'bad.yaml': goo.gle/debugonly  \nstatic_resources {\n}\n: Proto constraint validation failed (x)",
			"error initializing configuration 'bad.yaml' Proto constraint validation failed (x)"},
		{"one line", "[t][1][critical][main] [source/x.cc:1] unable to read file: /nope", "unable to read file: /nope"},
		{"no log lines", "something odd", "something odd"},
		{"control characters (a name from the bootstrap)", "[t][1][critical][main] [source/x.cc:1] unknown cluster 'a\x1b]0;title\x07'", `unknown cluster 'a\x1b]0;title\x07'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := envoyComplaint(tt.out); got != tt.want {
				t.Fatalf("envoyComplaint = %q, want %q", got, tt.want)
			}
		})
	}
}
