//go:build linux

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy/adminapi"
	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// drainCountRE matches a drain's STATUS= with connections counted.
var drainCountRE = regexp.MustCompile(`STATUS=draining: [1-9][0-9]* active connections`)

// adminSocketOptions runs the agent's Envoy with its admin on the unix
// socket at sock (mode 0600) and no admin port.
func adminSocketOptions(sock string) procOptions {
	return procOptions{
		envoy: map[string]string{"admin_port": "", "admin_socket": strconv.Quote(sock),
			"drain_duration": `"2s"`, "parent_shutdown_duration": `"3s"`},
		agent:     map[string]string{"exit_on_zero_active_connections": "true", "termination_drain_duration": `"3s"`},
		bootstrap: envoykit.BootstrapOptions{AdminSocket: sock, ResponseHeader: "s0"},
	}
}

// TestAdminOnAUnixSocketEndToEnd: Envoy's admin on a unix socket (only its
// user can connect), with the real Envoy, through everything the agent
// does with it: READY=1 from /ready, /healthz/ready, merged metrics, hot
// restarts (each new epoch binds the path afresh), a failed epoch (which
// takes the admin over and dies: the agent restores it), a drain that polls
// the active connections and ends at zero, and the quit.
func TestAdminOnAUnixSocketEndToEnd(t *testing.T) {
	// A folder every user can traverse: only the socket's own mode keeps
	// other users out.
	sockDir, err := os.MkdirTemp("", "adminsock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	if err := os.Chmod(sockDir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(sockDir, "admin.sock")
	p := startAgent(t, adminSocketOptions(sock))
	admin := adminapi.NewUnix(sock)
	ctx := context.Background()

	fi, err := os.Stat(sock)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin socket: %v %v; want a socket, mode 0600", fi, err)
	}
	if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p.ports.Admin)), time.Second); err == nil {
		c.Close()
		t.Fatalf("something listens on the admin port %d", p.ports.Admin)
	}
	if r, err := admin.Ready(ctx); err != nil || !r.Live {
		t.Fatalf("/ready on the socket: %+v %v", r, err)
	}
	if os.Geteuid() == 0 {
		// Another local user cannot connect (on TCP loopback anyone could);
		// the same client as the agent's user gets LIVE.
		curl := func(uid uint32) (string, error) {
			cmd := exec.Command("curl", "-sS", "--max-time", "5", "--unix-socket", sock, "http://envoy/ready")
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		if out, err := curl(0); err != nil || strings.TrimSpace(out) != "LIVE" {
			t.Fatalf("curl --unix-socket as the agent's user: %v %s", err, out)
		}
		out, err := curl(65534)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 7 {
			t.Fatalf("curl --unix-socket as uid 65534: %v %s; want exit 7 (cannot connect)", err, out)
		}
	}
	if c := p.healthz(); c != 200 {
		t.Fatalf("/healthz/ready = %d", c)
	}
	if got := p.metric("envoy_server_live{}"); got != "1" {
		t.Errorf("merged metrics: envoy_server_live = %q, want 1 (Envoy's, read through the socket)", got)
	}

	l := envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: envoykit.URL(p.ports.Listener, "/"), Connections: 2})
	defer l.Stop()
	for i := 1; i <= 2; i++ {
		p.rewriteBootstrap(envoykit.BootstrapOptions{AdminSocket: sock, ResponseHeader: "s" + strconv.Itoa(i)})
		if code, out := p.reload(); code != 0 || !strings.Contains(out, "epoch "+strconv.Itoa(i)+" is serving") {
			t.Fatalf("reload %d: exit %d: %s", i, code, out)
		}
		si, err := admin.ServerInfo(ctx)
		if err != nil || si.CommandLineOptions.RestartEpoch != i || si.State != "LIVE" {
			t.Fatalf("after reload %d the socket answers %+v %v", i, si, err)
		}
	}

	// A new epoch that dies after taking the admin over (its listener
	// port is taken): the serving epoch keeps serving, and the agent
	// gives the admin socket back to the serving configuration.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	ports := p.ports
	ports.Listener = taken.Addr().(*net.TCPAddr).Port
	good := readFileT(t, filepath.Join(p.dir, "envoy.yaml"))
	envoykit.WriteBootstrap(t, p.dir, "envoy.yaml", envoykit.BootstrapOptions{Ports: ports, AdminSocket: sock, ResponseHeader: "bad"})
	code, out := p.reload()
	if code != 1 || !strings.Contains(out, "Address already in use") || !strings.Contains(out, "keeps serving") {
		t.Fatalf("reload onto a taken port: exit %d: %s", code, out)
	}
	if r, err := admin.Ready(ctx); err != nil || !r.Live {
		t.Fatalf("/ready on the socket after the failed epoch: %+v %v (%s)", r, err, out)
	}
	writeFile(t, filepath.Join(p.dir, "envoy.yaml"), good)
	if code, out := p.reload(); code != 0 {
		t.Fatalf("good reload after the failed one: exit %d: %s", code, out)
	}
	l.Stop()
	if l.Failed() != 0 || l.Versions()["bad"] != 0 {
		t.Fatalf("%d requests failed (last: %s), versions %v", l.Failed(), l.LastErr(), l.Versions())
	}

	// A client that keeps its connection open through the stop (the load's
	// own connections closed when it stopped, and the drain counts from the
	// kernel, which sees exactly what is open).
	held, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(p.ports.Listener))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if _, err := held.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	if resp, err := http.ReadResponse(bufio.NewReader(held), nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("the held connection's request: %v %v", resp, err)
	}

	// The stop: the drain counts the active connections (STATUS= says how
	// many), ends at zero or at termination_drain_duration, then Envoy quits
	// through the socket (no SIGTERM fallback).
	code, took := p.wait(p.signal(syscall.SIGTERM), 30*time.Second)
	log := p.stderr.String()
	if code != 0 || !(strings.Contains(log, "termination drain duration reached") || strings.Contains(log, "no active connections left")) {
		t.Fatalf("stop: exit %d after %s; want 0 after the drain:\n%s", code, took, log)
	}
	counted := false
	for _, m := range p.ns.Messages() {
		counted = counted || drainCountRE.MatchString(m.Text)
	}
	if !counted {
		t.Errorf("no STATUS= counted the load's open connections; got %v", p.ns.Messages())
	}
	if strings.Contains(log, "sending SIGTERM") {
		t.Errorf("Envoy did not take /quitquitquit through the socket:\n%s", log)
	}
	if _, err := os.Lstat(sock); err == nil {
		t.Errorf("the admin socket %s is left behind", sock)
	}
	assertNoEnvoyFor(t, p.dir)
}

// TestAdminSocketMismatchIsRefused: the bootstrap's admin socket and the
// agent's admin_socket must agree, checked from the file (exit 3 before
// Envoy starts) and from the address Envoy really bound (extra_args moving
// it: Envoy is stopped, exit 3). (A bootstrap whose admin is on TCP runs
// with the agent's socket instead: TestTCPAdminRunsOnTheAgentsSocket.)
func TestAdminSocketMismatchIsRefused(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "admin.sock")
	other := filepath.Join(dir, "other.sock")
	tests := []struct {
		name      string
		bootstrap string
		envoy     map[string]string
		want      string
	}{
		{"bootstrap on another socket", other, nil, "envoy.admin_socket: is " + sock + ", but the bootstrap"},
		{"admin_port and admin_socket", sock, map[string]string{"admin_port": "15999"}, "envoy.admin_port: is set, and so is admin_socket"},
		{"moved by extra_args", sock, map[string]string{"extra_args": `["--config-yaml", "admin: {address: {pipe: {path: ` + other + `}}}"]`},
			"Envoy's admin listener is on the unix socket " + other + ", not on " + sock},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := adminSocketOptions(sock)
			o.bootstrap.AdminSocket = tt.bootstrap
			o.noWaitReady = true
			for k, v := range tt.envoy {
				o.envoy[k] = v
			}
			p := startAgent(t, o)
			code, _ := p.wait(p.started, 30*time.Second)
			if out := p.stderr.String(); code != 3 || !strings.Contains(out, tt.want) {
				t.Fatalf("exit %d, want 3 with %q:\n%s", code, tt.want, out)
			}
			assertNoEnvoyFor(t, p.dir)
		})
	}
}

// TestAdminDefaultsToAUnixSocket: with neither admin_port nor admin_socket
// set, Envoy's admin API is the unix socket admin.sock in the run folder,
// mode 0600: uid 1001 cannot connect, and nothing listens on TCP for it.
// (It was TCP port 15000, where any local user could read /config_dump,
// raise the log level with POST /logging, and stop Envoy with POST
// /quitquitquit; such a file with this bootstrap was refused, exit 3.) A
// TCP admin still works when admin_port is set, and run's log says once, in
// plain words, what any local user can then do.
func TestAdminDefaultsToAUnixSocket(t *testing.T) {
	t.Parallel()
	base := shortTempDir(t)
	if err := os.Chmod(base, 0o755); err != nil { // others may come to the socket itself
		t.Fatal(err)
	}
	runDir := filepath.Join(base, "run")
	sock := filepath.Join(runDir, "admin.sock")
	p := startAgent(t, procOptions{envoy: map[string]string{"admin_port": ""}, agent: map[string]string{"run_dir": strconv.Quote(runDir)},
		bootstrap: envoykit.BootstrapOptions{AdminSocket: sock}})
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin socket %s: %v %v; want a socket, mode 0600", sock, fi, err)
	}
	if r, err := adminapi.NewUnix(sock).Ready(context.Background()); err != nil || !r.Live {
		t.Fatalf("/ready on the default socket: %+v %v", r, err)
	}
	if strings.Contains(p.stderr.String(), "admin API is on TCP") {
		t.Fatalf("a warning about a TCP admin with the admin on a unix socket:\n%s", p.stderr)
	}
	if os.Geteuid() == 0 {
		if err := os.Chmod(runDir, 0o755); err != nil { // only the socket's mode keeps uid 1001 out
			t.Fatal(err)
		}
		cmd := exec.Command("curl", "-sS", "--max-time", "5", "--unix-socket", sock, "http://envoy/config_dump")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1001, Gid: 1001}}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 7 {
			t.Fatalf("curl --unix-socket %s/config_dump as uid 1001: %v %s; want exit 7 (cannot connect)", sock, err, out)
		}
		t.Logf("uid 1001: %s", strings.TrimSpace(string(out)))
	}
	if c := p.healthz(); c != 200 {
		t.Fatalf("/healthz/ready = %d", c)
	}

	// admin_port set (startAgent's default): a TCP admin, warned about once.
	tcp := startAgent(t, procOptions{})
	const warning = "Envoy's admin API is on TCP 127.0.0.1:"
	if n := strings.Count(tcp.stderr.String(), warning); n != 1 || !strings.Contains(tcp.stderr.String(), "POST /quitquitquit") {
		t.Fatalf("run with admin_port logged %q %d times, want once, naming what local users can do:\n%s", warning, n, tcp.stderr)
	}
}

// TestAdminSocketInAFolderOthersCanWriteIsRefused: admin_socket in a folder
// every user can write (as config.example.toml's /tmp path was). A local
// user binds the path first with a fake admin: a root agent took it for
// Envoy's, sent it /ready, /stats and POST /quitquitquit, and reported a
// LIVE Envoy before Envoy had started. Now validate and run refuse the
// folder (exit 3, naming envoy.admin_socket and who can write there), and
// the fake hears nothing.
func TestAdminSocketInAFolderOthersCanWriteIsRefused(t *testing.T) {
	shared := filepath.Join(shortTempDir(t), "tmp") // a folder like /tmp
	if err := os.Mkdir(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(shared, "admin.sock")
	ln, err := net.Listen("unix", sock) // the fake admin, bound first
	if err != nil {
		t.Fatal(err)
	}
	var heard atomic.Int32
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		heard.Add(1)
		t.Logf("the fake admin heard %s %s", r.Method, r.URL)
		if r.URL.Path == "/ready" {
			_, _ = w.Write([]byte("LIVE\n"))
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })

	o := adminSocketOptions(sock)
	o.noWaitReady = true
	p := startAgent(t, o)
	code, _ := p.wait(p.started, 30*time.Second)
	want := "envoy.admin_socket: its folder: " + shared + " is writable by its group or by others"
	if out := p.stderr.String(); code != 3 || !strings.Contains(out, want) {
		t.Fatalf("run: exit %d, want 3 with %q:\n%s", code, want, out)
	}
	if code, stdout, stderr := runAgent(t, "validate", "--config", p.config); code != 3 || !strings.Contains(stderr, want) {
		t.Fatalf("validate: exit %d, want 3 with %q:\n%s%s", code, want, stdout, stderr)
	}
	if n := heard.Load(); n != 0 {
		t.Fatalf("the fake admin in %s heard %d requests", shared, n)
	}
}

// TestTCPAdminRunsOnTheAgentsSocket: a bootstrap written as Envoy's
// examples are, with the admin on TCP 0.0.0.0 and a listener that serves
// /stats/prometheus through a cluster to that admin (the brotli, gzip,
// zstd and local_ratelimit examples), was refused (exit 3). With no admin
// key it runs unchanged: Envoy's admin is on the agent's socket, nothing
// listens on the bootstrap's admin port, a warning says so once and points
// at the metrics port (validate prints it too), and the statistics listener
// answers as a bare Envoy's of the same bootstrap does. With admin_port
// (and the admin on loopback) Envoy's TCP admin is kept, as before.
func TestTCPAdminRunsOnTheAgentsSocket(t *testing.T) {
	t.Parallel()
	adminPort, statsPort := envoykit.FreePort(t), envoykit.FreePort(t)
	p, path, o := exampleAgent(t, envoykit.ExampleOptions{Admin: fmt.Sprintf("0.0.0.0:%d", adminPort), StatsListener: statsPort}, nil)
	warning := fmt.Sprintf("%s: envoy.admin_socket: the bootstrap puts Envoy's admin API on TCP 0.0.0.0:%d, which is not used: Envoy runs it on the agent's private socket %s", path, adminPort, filepath.Join(p.dir, "run", "admin.sock"))
	if !p.logged(warning) || strings.Count(p.stderr.String(), warning) != 1 || !strings.Contains(p.stderr.String(), "level=warning msg=\""+warning) ||
		!strings.Contains(p.stderr.String(), "agent.prometheus_port") || !strings.Contains(p.stderr.String(), "cluster envoy-stats, which reached that address, reaches the socket instead") {
		t.Fatalf("run did not warn once %q, naming the metrics port and the cluster:\n%s", warning, p.stderr)
	}
	if code, stdout, stderr := runAgent(t, "validate", "--config", p.config); code != 0 || strings.Count(stdout, "warning: "+warning) != 1 {
		t.Errorf("validate: exit %d, want 0 with the warning once: %s%s", code, stdout, stderr)
	}
	if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", adminPort)); err == nil {
		c.Close()
		t.Errorf("something listens on the bootstrap's admin port %d", adminPort)
	}
	got, err := envoykit.Get(envoykit.URL(statsPort, "/stats/prometheus"), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	bare := envoykit.ExampleOptions{Listener: envoykit.FreePort(t), Upstream: o.Upstream, Admin: fmt.Sprintf("0.0.0.0:%d", envoykit.FreePort(t)), StatsListener: envoykit.FreePort(t)}
	startBare(t, bare)
	want, err := envoykit.Get(envoykit.URL(bare.StatsListener, "/stats/prometheus"), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got.Code != 200 || got.Code != want.Code || got.Header.Get("Content-Type") != want.Header.Get("Content-Type") {
		t.Fatalf("/stats/prometheus through the listener: the agent's Envoy %d %q, the bare Envoy %d %q", got.Code, got.Header.Get("Content-Type"), want.Code, want.Header.Get("Content-Type"))
	}
	// Every metric family the bare Envoy serves, the agent's serves (which
	// has more: those of its LDS, CDS and RDS files).
	families := func(body string) map[string]bool {
		out := map[string]bool{}
		for line := range strings.Lines(body) {
			if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
				name, _, _ := strings.Cut(f, " ")
				out[name] = true
			}
		}
		return out
	}
	mine, theirs := families(got.Body), families(want.Body)
	var missing []string
	for f := range theirs {
		if !mine[f] {
			missing = append(missing, f)
		}
	}
	if len(theirs) == 0 || !mine["envoy_server_live"] || len(missing) > 0 {
		t.Errorf("metric families the bare Envoy serves and the agent's does not: %v (the bare one serves %d)", missing, len(theirs))
	}
	t.Logf("/stats/prometheus through the listener: %d %s, %d metric families (the bare Envoy's: %d %s, %d)", got.Code, got.Header.Get("Content-Type"), len(mine), want.Code, want.Header.Get("Content-Type"), len(theirs))

	// admin_port, and the admin on loopback: Envoy's TCP admin, as before.
	tcpAdmin, tcpStats := envoykit.FreePort(t), envoykit.FreePort(t)
	q, _, _ := exampleAgent(t, envoykit.ExampleOptions{Admin: fmt.Sprintf("127.0.0.1:%d", tcpAdmin), StatsListener: tcpStats}, map[string]string{"admin_port": strconv.Itoa(tcpAdmin)})
	if r, err := envoykit.Get(envoykit.URL(tcpAdmin, "/ready"), 5*time.Second); err != nil || r.Code != 200 {
		t.Errorf("the TCP admin with admin_port: %+v %v", r, err)
	}
	if r, err := envoykit.Get(envoykit.URL(tcpStats, "/stats/prometheus"), 5*time.Second); err != nil || r.Code != 200 || !strings.Contains(r.Body, "# TYPE envoy_server_live") {
		t.Errorf("/stats/prometheus through the listener with admin_port: %d %v", r.Code, err)
	}
	if strings.Contains(q.stderr.String(), "which is not used") {
		t.Errorf("a TCP admin kept by admin_port was said not to be used:\n%s", q.stderr)
	}
}
