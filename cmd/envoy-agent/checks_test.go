//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/envoy-agent/envoy-agent/internal/testenvoy"
)

// TestValidateRefusesWhatRunWouldRefuse: each of these passed validate and
// then failed run (or every reload) under systemd, a restart loop. With the
// real Envoy as the binary, validate and run now both refuse them, exit 3,
// naming file, line and key.
func TestValidateRefusesWhatRunWouldRefuse(t *testing.T) {
	dir := t.TempDir()
	bin := testenvoy.Binary(t)
	ports := testenvoy.NewPorts(t)
	ports.Upstream = testenvoy.FreePort(t)
	testenvoy.WriteBootstrap(t, dir, "envoy.yaml", testenvoy.BootstrapOptions{Ports: ports})
	head := "[envoy]\nconfig_path = \"envoy.yaml\"\nadmin_port = " + strconv.Itoa(ports.Admin) + "\n"
	tail := "[agent]\nstatus_port = " + strconv.Itoa(ports.Status) + "\nprometheus_port = 0\n"
	binary := "binary_path = " + strconv.Quote(bin) + "\n"
	tests := []struct {
		name, text, want string
	}{
		{"--base-id in extra_args", head + binary + "extra_args = [\"--base-id\", \"7\"]\n" + tail, "config.toml:5: envoy.extra_args: \"--base-id\" is set by the agent; use envoy.base_id"},
		{"--restart-epoch= in extra_args", head + binary + "extra_args = [\"--restart-epoch=3\"]\n" + tail, "config.toml:5: envoy.extra_args: \"--restart-epoch=3\" is set by the agent"},
		{"--admin-address-path in extra_args", head + binary + "extra_args = [\"--admin-address-path\", \"/tmp/x\"]\n" + tail, "config.toml:5: envoy.extra_args: \"--admin-address-path\" is set by the agent"},
		{"drain_duration overflow", head + binary + "drain_duration = \"2562047h\"\nparent_shutdown_duration = \"2562047h1m\"\n" + tail, "config.toml:5: envoy.drain_duration: 2562047h0m0s is more than the 1h0m0s the agent allows"},
		{"start_timeout overflow", head + binary + tail + "start_timeout = \"2562047h\"\n", "config.toml:8: agent.start_timeout: 2562047h0m0s is more than the 1h0m0s"},
		{"base_id wraps", head + binary + "base_id = 4294967295\n" + tail, "config.toml:5: envoy.base_id: 4294967295 is more than 429496729"},
		{"binary is not an Envoy", head + "binary_path = \"/bin/true\"\n" + tail, "config.toml:4: envoy.binary_path: /bin/true is not an Envoy: it printed no Envoy version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := filepath.Join(dir, "config.toml")
			if err := os.WriteFile(cfg, []byte(tt.text), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, cmd := range []string{"validate", "run"} {
				code, stdout, stderr := runAgent(t, cmd, "--config", cfg)
				if tt.name == "binary is not an Envoy" && cmd == "run" {
					// run does not repeat validate's checks of Envoy (the
					// unit's ExecStartPre does): Envoy not starting says it.
					if code == 0 {
						t.Fatalf("run with /bin/true: exit 0")
					}
					continue
				}
				if code != 3 || !strings.Contains(stderr, tt.want) {
					t.Fatalf("%s: exit %d, want 3 with %q:\n%s%s", cmd, code, tt.want, stdout, stderr)
				}
			}
			assertNoEnvoyFor(t, dir)
		})
	}
}
