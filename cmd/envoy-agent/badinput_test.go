//go:build linux

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

func TestCommandLine(t *testing.T) {
	tests := []struct {
		args []string
		code int
		out  string // in stdout or stderr
	}{
		{[]string{"version"}, 0, "envoy-agent "},
		{[]string{"help"}, 0, "Usage:"},
		{[]string{"--help"}, 0, "Usage:"},
		{[]string{"run", "--help"}, 0, "Usage: envoy-agent run [--config FILE]"},
		{[]string{"validate", "-h"}, 0, "Usage: envoy-agent validate [--config FILE]"},
		{[]string{"version", "--help"}, 0, "Usage: envoy-agent version"},
		{[]string{}, 2, "Usage:"},
		{[]string{"start"}, 2, `unknown command "start"`},
		{[]string{"run", "--confg", "x"}, 2, "flag provided but not defined: -confg"},
		{[]string{"run", "extra"}, 2, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runAgent(t, tt.args...)
			if code != tt.code || !strings.Contains(stdout+stderr, tt.out) {
				t.Fatalf("exit %d, output %q; want exit %d with %q", code, stdout+stderr, tt.code, tt.out)
			}
		})
	}
}

// TestBadInputNeverStartsEnvoy: each bad input gets one clear message
// naming the file, line and key, a non-zero exit, and no Envoy left.
func TestBadInputNeverStartsEnvoy(t *testing.T) {
	dir := t.TempDir()
	bin := envoykit.Binary(t)
	ports := envoykit.NewPorts(t)
	ports.Upstream = envoykit.FreePort(t)
	envoykit.WriteBootstrap(t, dir, "envoy.yaml", envoykit.BootstrapOptions{Ports: ports})
	rejected := filepath.Join(dir, "rejected.yaml")
	if err := os.WriteFile(rejected, []byte("admin:\n  address: {socket_address: {address: 127.0.0.1, port_value: "+strconv.Itoa(ports.Admin)+"}}\nstatic_resources:\n  clusters:\n  - name: c\n    type: NOT_A_TYPE\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	head := func(bootstrap string) string {
		return "[envoy]\nbinary_path = " + strconv.Quote(bin) + "\nconfig_path = " + strconv.Quote(bootstrap) +
			"\nadmin_port = " + strconv.Itoa(ports.Admin) + "\nbase_id = " + strconv.Itoa(int(envoykit.BaseID())) + "\n"
	}
	agent := "[agent]\nstatus_port = " + strconv.Itoa(ports.Status) + "\nprometheus_port = 0\nrun_dir = \"run\"\n"
	otherAdmin := envoykit.FreePort(t)
	tests := []struct {
		name     string
		cmd      string
		text     string
		code     int
		messages []string
	}{
		{"toml syntax error", "run", head("envoy.yaml") + "log_level = \n" + agent, 3, []string{"config.toml:6: envoy.log_level:"}},
		{"unknown key", "run", head("envoy.yaml") + "drain_durration = \"5s\"\n" + agent, 3, []string{"config.toml:6: envoy.drain_durration: unknown key (did you mean \"drain_duration\"?)"}},
		{"wrong type", "validate", head("envoy.yaml") + agent + "min_drain_duration = 5\n", 3, []string{"config.toml:10: agent.min_drain_duration: wrong type"}},
		{"missing binary", "run", "[envoy]\nbinary_path = \"/opt/none/envoy\"\nconfig_path = \"envoy.yaml\"\n" + agent, 3, []string{"config.toml:2: envoy.binary_path: envoy binary stat /opt/none/envoy: no such file or directory"}},
		{"bootstrap rejected, validate", "validate", head("rejected.yaml") + agent, 3, []string{"rejected.yaml: Envoy rejects this bootstrap:", "NOT_A_TYPE"}},
		{"bootstrap rejected, run", "run", head("rejected.yaml") + agent + "reload_method = \"hot_restart\"\n", 1, []string{"envoy exited before it was LIVE: exit status 1", "NOT_A_TYPE"}},
		// Run from resource files (the default), Envoy takes the cluster
		// from the CDS file, and xDS ignores an unknown enum value unless
		// told not to (--reject-unknown-dynamic-fields): the start fails.
		{"bootstrap rejected, run in place", "run", head("rejected.yaml") + agent, 1, []string{"envoy is LIVE without all of its listeners, clusters, routes and secrets", "Envoy has not taken cds.yaml whole", "NOT_A_TYPE"}},
		{"admin moved by extra_args", "run", head("envoy.yaml") + "extra_args = [\"--config-yaml\", \"admin: {address: {socket_address: {address: 127.0.0.1, port_value: " + strconv.Itoa(otherAdmin) + "}}}\"]\n" + agent,
			3, []string{"Envoy's admin listener is on 127.0.0.1:" + strconv.Itoa(otherAdmin) + ", not on port " + strconv.Itoa(ports.Admin)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := filepath.Join(dir, "config.toml")
			if err := os.WriteFile(cfg, []byte(tt.text), 0o644); err != nil {
				t.Fatal(err)
			}
			code, stdout, stderr := runAgent(t, tt.cmd, "--config", cfg)
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tt.code, stderr)
			}
			for _, m := range tt.messages {
				if !strings.Contains(stderr, m) {
					t.Errorf("stderr lacks %q:\n%s", m, stderr)
				}
			}
			if strings.Contains(stdout, "OK") {
				t.Errorf("stdout says OK: %q", stdout)
			}
			assertNoEnvoyFor(t, dir)
		})
	}
}

func TestValidateExampleConfig(t *testing.T) {
	cmd := exec.Command(agentBin(t), "validate", "--config", filepath.Join(envoykit.RepoRoot(t), "config.example.toml"))
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(envoykit.Binary(t))+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err != nil || !strings.HasPrefix(lines[len(lines)-1], "OK: ") || strings.Contains(string(out), "warning:") {
		t.Fatalf("validate config.example.toml: %v\n%s", err, out)
	}
}

func TestUnreadableConfigAsAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the agent as another user")
	}
	dir, err := os.MkdirTemp("", "unreadable")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte("[envoy]\nadmin_port = 15000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(agentBin(t), "validate", "--config", cfg)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 3 || !strings.Contains(stderr.String(), cfg+": cannot read the configuration") ||
		!strings.Contains(stderr.String(), "permission denied") {
		t.Fatalf("as uid 65534: %v, stderr %q; want exit 3 naming the file and the permission", err, stderr.String())
	}
}
