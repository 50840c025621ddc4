//go:build linux

package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"golang.org/x/sys/unix"

	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// configDir writes a bootstrap (admin on 15000) and returns the folder and
// the real Envoy's path.
func configDir(t *testing.T) (dir, envoyBin string) {
	t.Helper()
	dir = t.TempDir()
	envoykit.WriteBootstrap(t, dir, "envoy.yaml", envoykit.BootstrapOptions{Ports: envoykit.Ports{Admin: 15000, Listener: 10000, Upstream: 10001}})
	return dir, envoykit.Binary(t)
}

func writeConfig(t *testing.T, dir, text string) string {
	t.Helper()
	p := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadConfigGood(t *testing.T) {
	dir, bin := configDir(t)
	path := writeConfig(t, dir, `[envoy]
binary_path = "`+bin+`"
config_path = "envoy.yaml"
admin_port = 15000
drain_duration = "10s"
parent_shutdown_duration = "15s"
base_id = 3
node_ips = ["::1"]

[agent]
termination_drain_duration = "7s"
min_drain_duration = "2s"
exit_on_zero_active_connections = true
`)
	cfg, err := LoadConfig(path)
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	if cfg.Envoy.ConfigPath != filepath.Join(dir, "envoy.yaml") {
		t.Errorf("config_path = %q, want it resolved against the file's folder", cfg.Envoy.ConfigPath)
	}
	if e := cfg.Envoy; e.DrainDuration.D() != 10*time.Second || e.ParentShutdownDuration.D() != 15*time.Second ||
		e.BaseID != 3 || e.AdminPort != 15000 || e.BinaryPath != bin || len(e.NodeIPs) != 1 {
		t.Errorf("[envoy] = %+v", e)
	}
	if cfg.Agent.TerminationDrainDuration.D() != 7*time.Second || cfg.Agent.MinDrainDuration.D() != 2*time.Second ||
		!cfg.Agent.ExitOnZeroActiveConnections || cfg.Agent.StatusPort != 15020 || cfg.Agent.StartTimeout.D() != time.Minute {
		t.Errorf("agent config = %+v", cfg.Agent)
	}
}

func TestExampleConfigLoads(t *testing.T) {
	t.Setenv("PATH", filepath.Dir(envoykit.Binary(t))+":"+os.Getenv("PATH"))
	if _, err := LoadConfig(filepath.Join(envoykit.RepoRoot(t), "config.example.toml")); err != nil {
		t.Fatalf("config.example.toml: %v", err)
	}
}

func TestLoadConfigBadInput(t *testing.T) {
	dir, bin := configDir(t)
	notExec := filepath.Join(dir, "envoy-not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	envoykit.WriteBootstrap(t, dir, "admin9901.yaml", envoykit.BootstrapOptions{Ports: envoykit.Ports{Admin: 9901, Listener: 10000, Upstream: 10001}})
	envoykit.WriteBootstrap(t, dir, "admin-any.yaml", envoykit.BootstrapOptions{AdminAddress: "0.0.0.0", Ports: envoykit.Ports{Admin: 15000, Listener: 10000, Upstream: 10001}})
	head := "[envoy]\nbinary_path = \"" + bin + "\"\nconfig_path = \"envoy.yaml\"\nadmin_port = 15000\n"
	tests := []struct {
		name string
		text string
		line int
		key  string
		msg  string
	}{
		{name: "TOML syntax error", text: head + "log_level = \"info\n", line: 5, key: "envoy.log_level", msg: "newline"},
		{name: "unknown key", text: head + "admin_prot = 15000\n", line: 5, key: "envoy.admin_prot", msg: `unknown key (did you mean "admin_port"?)`},
		{name: "unknown table", text: head + "[agnet]\nstatus_port = 1\n", line: 5, key: "agnet", msg: "unknown key (the tables are [envoy] and [agent])"},
		{name: "wrong type for a port", text: head + "[agent]\nstatus_port = \"15020\"\n", line: 6, key: "agent.status_port", msg: "wrong type: want a port number, got a string"},
		{name: "wrong type for a bool", text: head + "log_as_json = \"yes\"\n", line: 5, key: "envoy.log_as_json", msg: "incompatible types"},
		{name: "bad duration", text: head + "drain_duration = \"45\"\n", line: 5, key: "envoy.drain_duration", msg: `bad duration "45"`},
		{name: "duration as a number", text: head + "drain_duration = 45\n", line: 5, key: "envoy.drain_duration", msg: "wrong type: want a duration string"},
		{name: "port out of range", text: head + "[agent]\nstatus_port = 70000\n", line: 6, key: "agent.status_port", msg: "port 70000 is out of range"},
		{name: "parent shutdown not above drain", text: head + "drain_duration = \"60s\"\nparent_shutdown_duration = \"60s\"\n", line: 6, key: "envoy.parent_shutdown_duration", msg: "must be longer than drain_duration"},
		{name: "min drain above termination", text: head + "[agent]\ntermination_drain_duration = \"5s\"\nmin_drain_duration = \"10s\"\n", line: 7, key: "agent.min_drain_duration", msg: "must not exceed termination_drain_duration"},
		{name: "missing binary", text: "[envoy]\nbinary_path = \"/nonexistent/envoy\"\nconfig_path = \"envoy.yaml\"\nadmin_port = 15000\n", line: 2, key: "envoy.binary_path", msg: "no such file"},
		{name: "binary not in PATH", text: "[envoy]\nbinary_path = \"envoy-that-is-not-there\"\nconfig_path = \"envoy.yaml\"\nadmin_port = 15000\n", line: 2, key: "envoy.binary_path", msg: "not found in PATH"},
		{name: "binary not executable", text: "[envoy]\nbinary_path = \"" + notExec + "\"\nconfig_path = \"envoy.yaml\"\nadmin_port = 15000\n", line: 2, key: "envoy.binary_path", msg: "not executable"},
		{name: "missing bootstrap", text: "[envoy]\nbinary_path = \"" + bin + "\"\nconfig_path = \"nope.yaml\"\n", line: 3, key: "envoy.config_path", msg: "no such file"},
		{name: "admin port not the bootstrap's", text: "[envoy]\nbinary_path = \"" + bin + "\"\nconfig_path = \"admin9901.yaml\"\nadmin_port = 15000\n", line: 4, key: "envoy.admin_port", msg: "puts Envoy's admin listener on port 9901"},
		{name: "admin beyond loopback", text: "[envoy]\nbinary_path = \"" + bin + "\"\nconfig_path = \"admin-any.yaml\"\nadmin_port = 15000\n", key: "envoy.allow_remote_admin", msg: "reachable beyond this host"},
		{name: "same port twice", text: head + "[agent]\nstatus_port = 15000\n", line: 6, key: "agent.status_port", msg: "also envoy.admin_port"},
		{name: "localhost not loopback", text: head + "[agent]\nlocalhost = \"0.0.0.0\"\n", line: 6, key: "agent.localhost", msg: "must be a loopback address"},
		{name: "unknown envoy log level", text: head + "log_level = \"loud\"\n", line: 5, key: "envoy.log_level", msg: `unknown level "loud"`},
		{name: "bad component level", text: head + "component_log_level = \"upstream\"\n", line: 5, key: "envoy.component_log_level", msg: "want component:level"},
		{name: "bad log format", text: head + "[agent]\nlog_format = \"xml\"\n", line: 6, key: "agent.log_format", msg: `unknown format "xml"`},
		{name: "negative base id", text: head + "base_id = -1\n", line: 5, key: "envoy.base_id", msg: "out of range"},
		{name: "run_dir too long for its sockets", text: head + "[agent]\nrun_dir = \"/run/" + strings.Repeat("x", 100) + "\"\n", line: 6, key: "agent.run_dir", msg: "is too long for Envoy's hot-restart sockets"},
		{name: "run_dir too long for Envoy's hot-restart sockets only", text: head + "[agent]\nrun_dir = \"/run/" + strings.Repeat("x", 80) + "\"\n", line: 6, key: "agent.run_dir", msg: "use a run folder at most 82 bytes long"},
		{name: "control socket set, too long", text: head + "[agent]\ncontrol_socket = \"/run/" + strings.Repeat("x", 110) + "\"\n", line: 6, key: "agent.control_socket", msg: "a unix socket path holds at most 107"},
		{name: "bad node ip", text: head + "node_ips = [\"10.0.0.300\"]\n", line: 5, key: "envoy.node_ips", msg: "not an IP address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, dir, tt.text)
			_, err := LoadConfig(path)
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("LoadConfig = %v, want a *ConfigError", err)
			}
			if len(ce.Problems) != 1 {
				t.Fatalf("want one problem, got %d:\n%v", len(ce.Problems), ce)
			}
			p := ce.Problems[0]
			if p.File != path || p.Line != tt.line || p.Key != tt.key || !strings.Contains(p.Msg, tt.msg) {
				t.Fatalf("problem = %+v\nwant file %s, line %d, key %q, message with %q", p, path, tt.line, tt.key, tt.msg)
			}
			if s := ce.Error(); !strings.HasPrefix(s, path) {
				t.Errorf("message %q does not start with the file name", s)
			}
		})
	}
}

func TestLoadConfigReportsEveryProblem(t *testing.T) {
	dir, bin := configDir(t)
	path := writeConfig(t, dir, "[envoy]\nbinary_path = \""+bin+"\"\nconfig_path = \"envoy.yaml\"\nadmin_port = 15000\nadmin_prot = 1\n[agent]\nlog_format = \"xml\"\nstart_timeout = \"0s\"\n")
	_, err := LoadConfig(path)
	var ce *ConfigError
	if !errors.As(err, &ce) || len(ce.Problems) != 3 {
		t.Fatalf("want 3 problems, got %v", err)
	}
	want := []string{path + ":5: envoy.admin_prot: unknown key", path + ":7: agent.log_format:", path + ":8: agent.start_timeout:"}
	for i, w := range want {
		if !strings.HasPrefix(ce.Problems[i].String(), w) {
			t.Errorf("problem %d = %q, want it to start %q", i, ce.Problems[i], w)
		}
	}
}

func TestLoadConfigFileProblems(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.toml")
	if err := os.WriteFile(big, make([]byte, maxConfigSize+1), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, path, msg string }{
		{"missing", filepath.Join(dir, "none.toml"), "no such file"},
		{"a directory", dir, "not a regular file"},
		{"too large", big, "is not a configuration file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadConfig(tt.path)
			var ce *ConfigError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), tt.msg) || !strings.HasPrefix(err.Error(), tt.path) {
				t.Fatalf("err = %v; want a ConfigError for %s with %q", err, tt.path, tt.msg)
			}
		})
	}
}

// TestDeepNestingIsRefusedFast: 16,000 nested inline tables (64 KB, under
// the size cap) took the TOML decoder 31 s and 10.5 GB; they are refused
// before decoding, with the line.
func TestDeepNestingIsRefusedFast(t *testing.T) {
	dir := t.TempDir()
	deep := "[envoy]\nextra_args = []\n[agent]\nx = " + strings.Repeat("{a=", 16000) + "1" + strings.Repeat("}", 16000) + "\n"
	path := filepath.Join(dir, "deep.toml")
	if err := os.WriteFile(path, []byte(deep), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := LoadConfig(path)
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), path+":4: arrays and inline tables nest more than") {
		t.Fatalf("LoadConfig = %v, want the nesting refused at line 4", err)
	}
	// The decoder took 31 s; the refusal reads the text once.
	if took > 5*time.Second {
		t.Fatalf("refusing took %s", took)
	}
	// Strings and comments do not count.
	ok := "[envoy]\nextra_args = [\"[[[[[[[[[[[[[[[[[[[[{{{{{{{{{{{{{{{{{{{{\", '''\n{{{{{{{{{{{{{{{{{{{{{{{{{\n'''] # [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n"
	if err := checkNesting([]byte(ok)); err != nil {
		t.Fatalf("checkNesting counted brackets in strings or comments: %v", err)
	}
}

// TestFIFOIsRefusedWithoutBlocking: a FIFO as the configuration or as
// Envoy's bootstrap is refused at once (an open would block until a writer
// came).
func TestFIFOIsRefusedWithoutBlocking(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 2)
	go func() { _, err := LoadConfig(fifo); done <- err }()
	go func() {
		_, err := LoadConfig(writeConfig(t, dir, "[envoy]\nconfig_path = \"fifo\"\n"))
		done <- err
	}()
	for i := 0; i < 2; i++ {
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "is not a regular file (a FIFO)") {
				t.Fatalf("LoadConfig = %v, want a FIFO refused", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("LoadConfig blocked on a FIFO")
		}
	}
}

func TestDefaultRunDir(t *testing.T) {
	tests := []struct{ file, want string }{
		{"/etc/envoy-agent/config.toml", "/run/envoy-agent"},
		{"/etc/envoy-agent/edge.toml", "/run/envoy-agent-edge"},
		{"/etc/envoy-agent/egress-2.toml", "/run/envoy-agent-egress-2"},
		{"/etc/envoy-agent/sub/edge.toml", "/run/envoy-agent"},
		{"/etc/envoy-agent/edge.conf", "/run/envoy-agent"},
		{"/srv/edge.toml", "/run/envoy-agent"},
	}
	for _, tt := range tests {
		if got := defaultRunDir(tt.file); got != tt.want {
			t.Errorf("defaultRunDir(%q) = %q, want %q", tt.file, got, tt.want)
		}
	}
}

// Root validating the file of a service whose run_dir the service user
// owns (0750, as systemd's RuntimeDirectory= makes it) is no error: who
// owns it is checked by the agent that runs. A run_dir others can write is
// refused whoever asks.
func TestLoadConfigRunDirOwnedByTheServiceUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the folder to another user")
	}
	dir, bin := configDir(t)
	rd := filepath.Join(dir, "run")
	if err := os.Mkdir(rd, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(rd, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	text := "[envoy]\nbinary_path = \"" + bin + "\"\nconfig_path = \"envoy.yaml\"\nadmin_port = 15000\n\n[agent]\nrun_dir = \"run\"\n"
	if _, err := LoadConfig(writeConfig(t, dir, text)); err != nil {
		t.Fatalf("LoadConfig with run_dir owned by uid 65534 (0750): %v", err)
	}
	if err := os.Chmod(rd, 0o770); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(writeConfig(t, dir, text)); err == nil || !strings.Contains(err.Error(), "agent.run_dir") {
		t.Fatalf("LoadConfig with a group-writable run_dir: %v, want an agent.run_dir error", err)
	}
}

func TestAdminAddress(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"port", Config{Envoy: EnvoyConfig{AdminPort: 15000}, Agent: AgentConfig{Localhost: "127.0.0.1"}}, "127.0.0.1:15000"},
		{"socket", Config{Envoy: EnvoyConfig{AdminSocket: "/run/envoy-agent/admin.sock"}, Agent: AgentConfig{Localhost: "127.0.0.1"}}, "unix:/run/envoy-agent/admin.sock"},
	}
	for _, tt := range tests {
		if got := tt.cfg.AdminAddress(); got != tt.want {
			t.Errorf("%s: adminAddress() = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestHostileKeysAreRefusedInBoundedMemory: the TOML decoder's memory grows
// with the square of a key's dotted parts (8,000 parts: 838 MB; 200 KB of
// "d.d.d…=1": 23 GB; a 100,000-part table header: 46.8 s and 10 GB). Each
// is refused before decoding, by LoadConfig and by LoadUnchecked (the
// clients' read), naming the file, the line and the key, in a child under
// a 512 MiB data limit; the keys a configuration has still load.
func TestHostileKeysAreRefusedInBoundedMemory(t *testing.T) {
	if child, used := envoykit.UnderMemoryLimit(t, 512<<20); !child {
		if used.CPU > 10*time.Second {
			t.Fatalf("the refusals took %s of CPU", used.CPU)
		}
		return
	}
	dotted := func(n int) string { return strings.Repeat("d.", n-1) + "d" }
	tests := []struct {
		name, text string
		line       int
		msg        string
	}{
		{"8,000 parts", dotted(8000) + " = 1\n", 1, "a key of 17 or more dotted parts"},
		{"200 KB of parts", "[envoy]\nadmin_port = 15000\n" + dotted(100000) + "=1\n", 3, "a key of 17 or more dotted parts"},
		{"100,000-part header", "[" + dotted(100000) + "]\n", 1, "a key of 17 or more dotted parts"},
		{"array of tables header", "[[" + dotted(100) + "]]\n", 1, "dotted parts"},
		{"inline table key", "[agent]\nx = {" + dotted(5000) + " = 1}\n", 2, "dotted parts"},
		{"quoted parts", "[agent]\n" + strings.Repeat(`"a".`, 40) + "b = 1\n", 2, "dotted parts"},
		{"spaced parts", "[agent]\n" + strings.Repeat("a . ", 40) + "b = 1\n", 2, "dotted parts"},
		{"long key", "[agent]\n" + strings.Repeat("k", 100000) + " = 1\n", 2, "a key of 100000 bytes"},
		{"long quoted key", "[agent]\n\"" + strings.Repeat("k", 100000) + "\" = 1\n", 2, "bytes; more than 1024"},
		{"long header", "[" + strings.Repeat("k", 5000) + "]\n", 1, "a key of 5000 bytes"},
	}
	dir := t.TempDir()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, "hostile.toml")
			if err := os.WriteFile(path, []byte(tt.text), 0o600); err != nil {
				t.Fatal(err)
			}
			for _, load := range []func(string) (*Config, error){LoadConfig, LoadUnchecked} {
				_, err := load(path)
				var ce *ConfigError
				if !errors.As(err, &ce) || len(ce.Problems) != 1 {
					t.Fatalf("err = %v; want one problem", err)
				}
				p := ce.Problems[0]
				if p.Line != tt.line || p.Key == "" || !strings.Contains(p.Msg, tt.msg) || !strings.HasPrefix(err.Error(), fmt.Sprintf("%s:%d: ", path, tt.line)) {
					t.Fatalf("problem %q; want %s:%d: KEY: …%s…", err, path, tt.line, tt.msg)
				}
			}
		})
	}
	// What a configuration holds is not refused: two-part keys, floats and
	// dates (one dot each), dots and brackets in strings and comments.
	ok := "envoy.admin_port = 15000 # a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s\n[agent]\n" +
		"\"x.y.z.a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p\" = 1\nf = [1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5, 10.5, 11.5, 12.5, 13.5, 14.5, 15.5, 16.5, 17.5]\n" +
		"d = 1979-05-27T07:32:00.999999-07:00\ns = '''\na.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r\n'''\n" +
		"t = {a.b = 1.5, c = 2.5}\n[envoy.x.y]\n" + strings.Repeat("z", 1000) + " = \"" + strings.Repeat("v", 100000) + "\"\n"
	if err := checkNesting([]byte(ok)); err != nil {
		t.Fatalf("checkNesting refused a plain file: line %d: %s: %v", err.line, err.key, err)
	}
}

// A live upgrade hands the serving configuration over as JSON, which the
// new binary decodes with unknown fields refused: reload_method, unset,
// must not be in it, so that an agent that predates the key (a rollback)
// can still adopt.
func TestUnsetReloadMethodLeftOutOfTheJSON(t *testing.T) {
	for _, tt := range []struct {
		method string
		inJSON bool
	}{{"", false}, {ReloadHotRestart, true}, {ReloadAuto, true}} {
		c := DefaultConfig()
		c.Agent.ReloadMethod = tt.method
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(b), "ReloadMethod"); got != tt.inJSON {
			t.Errorf("reload_method %q: in the JSON %v, want %v: %s", tt.method, got, tt.inJSON, b)
		}
	}
}

// TestRunningCopyIsSaid: what the agent changes in its copy of the
// bootstrap is said once, as the configuration is loaded (run logs it,
// validate prints it): a TCP admin not used, at warning, pointing at the
// metrics port; an admin or a node given, as notes; a cluster that cannot
// follow the admin to the socket is refused with the edit to make.
func TestRunningCopyIsSaid(t *testing.T) {
	bin := envoykit.Binary(t)
	const node = "node: { id: n, cluster: c }\n"
	const tcpAdmin = "admin: { address: { socket_address: { address: 0.0.0.0, port_value: 9901 } } }\n"
	cluster := func(typ, endpoints string) string {
		return "static_resources:\n  clusters:\n  - name: envoy-stats\n    type: " + typ + "\n    load_assignment:\n      cluster_name: envoy-stats\n      endpoints: [{ lb_endpoints: [" + endpoints + "] }]\n"
	}
	admin := "{ endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 9901 } } } }"
	other := "{ endpoint: { address: { socket_address: { address: app, port_value: 80 } } } }"
	userAgent := func(tls string) string {
		return "admin: { address: { pipe: { path: DIR/run/admin.sock, mode: 0600 } } }\nstatic_resources: { listeners: [{ address: { socket_address: { address: 0.0.0.0, port_value: 10000 } }, filter_chains: [{ " + tls + "filters: [{ name: envoy.filters.network.http_connection_manager, typed_config: { \"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager, stat_prefix: ingress, add_user_agent: true, route_config: {}, http_filters: [{ name: envoy.filters.http.router, typed_config: { \"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router } }] } }] }] }] }\n"
	}
	const certFiles = "transport_socket: { name: tls, typed_config: { \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext, common_tls_context: { tls_certificates: [{ certificate_chain: { filename: DIR/cert.pem }, private_key: { filename: DIR/key.pem } }] } } }, "
	for _, tt := range []struct {
		name, bootstrap, toml string
		certs                 bool     // DIR/cert.pem and DIR/key.pem, a serving pair
		warnings, notes       []string // substrings, one a warning or note
		problem               string
	}{
		{name: "TCP admin, no admin key", bootstrap: node + tcpAdmin + cluster("STATIC", admin),
			warnings: []string{"puts Envoy's admin API on TCP 0.0.0.0:9901, which is not used: Envoy runs it on the agent's private socket", "agent.prometheus_port", "cluster envoy-stats, which reached that address, reaches the socket instead"}},
		{name: "no admin", bootstrap: node,
			notes: []string{"the bootstrap has no admin address; Envoy runs with its admin API on unix:"}},
		{name: "no admin, admin_port", bootstrap: node, toml: "admin_port = 15000\n",
			notes:    []string{"the bootstrap has no admin address; Envoy runs with its admin API on 127.0.0.1:15000"},
			warnings: []string{"Envoy's admin API is on TCP 127.0.0.1:15000"}},
		{name: "no node", bootstrap: "admin: { address: { pipe: { path: DIR/run/admin.sock, mode: 0600 } } }\n",
			notes: []string{`sets no node.id and node.cluster; Envoy runs with "envoy-agent" there`}},
		{name: "no node and add_user_agent", bootstrap: userAgent(""),
			warnings: []string{`the bootstrap sets no node.id and node.cluster, and 1 HTTP connection manager(s) set add_user_agent`, "the agent leaves them empty, as a bare Envoy runs it", "set node.id and node.cluster in the bootstrap to reload in place"}},
		{name: "certificates and add_user_agent", bootstrap: userAgent(certFiles), certs: true,
			notes:    []string{`sets no node.id and node.cluster; Envoy runs with "envoy-agent" there`},
			warnings: []string{`1 HTTP connection manager(s) set add_user_agent, so Envoy sends its node upstream (x-envoy-downstream-service-cluster and x-envoy-downstream-service-node: "envoy-agent"`, "Envoy needs one to read the certificates the agent serves it"}},
		{name: "a DNS cluster mixing the admin and others", bootstrap: node + tcpAdmin + cluster("STRICT_DNS", admin+", "+other),
			problem: "envoy.admin_port: is not set, so Envoy's admin API runs on the unix socket"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "envoy.yaml"), []byte(strings.ReplaceAll(tt.bootstrap, "DIR", dir)), 0o600); err != nil {
				t.Fatal(err)
			}
			if tt.certs {
				cert, key, _, err := envoykit.ServingPair(time.Now().Add(90 * 24 * time.Hour))
				if err != nil {
					t.Fatal(err)
				}
				for name, pem := range map[string]string{"cert.pem": cert, "key.pem": key} {
					if err := os.WriteFile(filepath.Join(dir, name), []byte(pem), 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}
			cfg, err := LoadConfig(writeConfig(t, dir, "[envoy]\nbinary_path = \""+bin+"\"\nconfig_path = \"envoy.yaml\"\n"+tt.toml+"[agent]\nrun_dir = \"run\"\n"))
			if tt.problem != "" {
				if err == nil || !strings.Contains(err.Error(), tt.problem) || !strings.Contains(err.Error(), "set admin_port = 9901") {
					t.Fatalf("LoadConfig = %v; want the problem %q naming admin_port = 9901", err, tt.problem)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []struct {
				what string
				got  []string
				subs []string
			}{{"warning", cfg.Warnings(), tt.warnings}, {"note", cfg.Notes(), tt.notes}} {
				text := strings.Join(want.got, "\n")
				for _, s := range want.subs {
					if !strings.Contains(text, s) {
						t.Errorf("no %s says %q:\n%s", want.what, s, text)
					}
				}
				if len(want.subs) == 0 && len(want.got) > 0 {
					t.Errorf("%ss %q, want none", want.what, want.got)
				}
			}
		})
	}
}

// TestLoadStartConfigKeepsTheBootstrap: a start's configuration keeps the
// bootstrap as its check decoded it, before the checks changed their tree
// (the admin moved, the node set, the certificates counted), for the
// first copy to take once; another load keeps none.
func TestLoadStartConfigKeepsTheBootstrap(t *testing.T) {
	dir, bin := configDir(t)
	path := writeConfig(t, dir, `[envoy]
binary_path = "`+bin+`"
config_path = "envoy.yaml"
`)
	data, err := os.ReadFile(filepath.Join(dir, "envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var fresh yaml.Node
	if err := bootyaml.Decode(data, &fresh); err != nil {
		t.Fatal(err)
	}
	want, err := bootyaml.Encode(&fresh, "envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadStartConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := cfg.TakeStartBootstrap().Take(data)
	if doc == nil {
		t.Fatal("a start's configuration kept no bootstrap")
	}
	if got, err := bootyaml.Encode(doc, "envoy.yaml"); err != nil || string(got) != string(want) {
		t.Fatalf("the bootstrap kept is not the file as decoded (%v):\n%s\nwant\n%s", err, got, want)
	}
	if cfg.TakeStartBootstrap() != nil {
		t.Error("taken twice")
	}
	if cfg, err := LoadConfig(path); err != nil || cfg.TakeStartBootstrap() != nil {
		t.Errorf("LoadConfig kept a bootstrap (%v)", err)
	}
}
