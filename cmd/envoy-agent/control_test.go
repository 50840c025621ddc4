//go:build linux

package main

// The control socket as a local attacker meets it: the tests run as root
// and play the other users with a copy of this test binary run under their
// credentials (uid 65534, with and without the agent's group).

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// statusPost POSTs route on the agent's TCP status port.
func statusPost(port int, route string) (int, error) {
	resp, err := http.Post(envoykit.URL(port, route), "", nil)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// controlRequestAs sends one request to a control socket as cred, and
// returns the helper's report: "code N" or "error: ...".
func controlRequestAs(t *testing.T, cred *syscall.Credential, sock, method, route string) string {
	t.Helper()
	cmd := exec.Command(testBinCopy)
	cmd.Env = append(os.Environ(), helperEnv+"=request", "SOCK="+sock, "METHOD="+method, "ROUTE="+route)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper as uid %d: %v", cred.Uid, err)
	}
	return strings.TrimSpace(string(out))
}

// openToAll lets every user read the test's files (the configuration, the
// bootstrap) and traverse to run_dir, which the agent makes 0750 itself.
func openToAll(t *testing.T, dir string) {
	t.Helper()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// TestControlOnlyOperators: a local user can neither quit, drain nor
// reload the agent, even with the socket's mode loosened by hand; the
// service group and root can.
func TestControlOnlyOperators(t *testing.T) {
	t.Parallel()
	p := startAgentWith(t, procOptions{}, func(envoykit.Ports) {})
	openToAll(t, p.dir)
	sock := p.controlSocket()
	for _, f := range []string{p.config, filepath.Join(p.dir, "envoy.yaml")} {
		if err := os.Chmod(f, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if fi, err := os.Stat(filepath.Dir(sock)); err != nil || fi.Mode().Perm() != 0o750 {
		t.Fatalf("run_dir %v, %v; want 0750", fi.Mode(), err)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o660 || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("control socket %v, %v; want a socket with mode 0660", fi.Mode(), err)
	}
	routes := []string{"/quitquitquit", "/drain", "/reload"}

	// 1. Another user cannot reach the socket at all.
	for _, route := range routes {
		if out := controlRequestAs(t, nobody, sock, "POST", route); !strings.Contains(out, "permission denied") {
			t.Errorf("uid 65534 POST %s: %s; want permission denied", route, out)
		}
	}
	if code, out := p.reloadAs(nobody); code == 0 || !strings.Contains(out, "permission denied") {
		t.Errorf("envoy-agent reload as uid 65534: exit %d: %s; want a failure with permission denied", code, out)
	}

	// 2. With the modes loosened by hand, the peer check still refuses it.
	if err := os.Chmod(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	for _, route := range routes {
		if out := controlRequestAs(t, nobody, sock, "POST", route); out != "code 403" {
			t.Errorf("uid 65534 POST %s on a 0666 socket: %s; want code 403", route, out)
		}
	}
	if code, out := p.reloadAs(nobody); code != 1 || !strings.Contains(out, "403") {
		t.Errorf("envoy-agent reload as uid 65534 on a 0666 socket: exit %d: %s; want 1 with 403", code, out)
	}
	if err := os.Chmod(filepath.Dir(sock), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sock, 0o660); err != nil {
		t.Fatal(err)
	}
	if code := p.healthz(); code != 200 {
		t.Fatalf("/healthz/ready = %d after the refused requests, want 200 (nothing drained)", code)
	}
	if r, err := envoykit.Get(envoykit.URL(p.ports.Listener, "/"), 5*time.Second); err != nil || r.Code != 200 {
		t.Fatalf("traffic after the refused requests: %+v, %v", r, err)
	}

	// 3. The service group can reload and drain; root can quit.
	if code, out := p.reloadAs(nobodyInAgentGroup); code != 0 || !strings.Contains(out, "reloaded: epoch 1 is serving") {
		t.Fatalf("envoy-agent reload in the service group: exit %d: %s; want epoch 1 (no earlier reload)", code, out)
	}
	if out := controlRequestAs(t, nobodyInAgentGroup, sock, "POST", "/drain"); out != "code 200" {
		t.Fatalf("POST /drain in the service group: %s", out)
	}
	if code := p.healthz(); code != 503 {
		t.Errorf("/healthz/ready = %d after /drain, want 503", code)
	}
	sent := time.Now()
	if code := p.post("/quitquitquit"); code != 200 {
		t.Fatalf("POST /quitquitquit as root = %d", code)
	}
	if code, _ := p.wait(sent, 10*time.Second); code != 0 {
		t.Fatalf("exit %d after /quitquitquit, want 0", code)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("control socket left after the exit: %v", err)
	}
	for _, want := range []string{"refused POST /quitquitquit", "/drain from pid", "/quitquitquit from pid"} {
		if !p.logged(want) {
			t.Errorf("the agent's log lacks %q", want)
		}
	}
}

// TestStatusPortSquatted: another user holding the status port fails the
// start, naming the port, the user and the process.
func TestStatusPortSquatted(t *testing.T) {
	t.Parallel()
	var helper *exec.Cmd
	p := startAgentWith(t, procOptions{noWaitReady: true}, func(ports envoykit.Ports) {
		var said string
		var ok bool
		helper, said, ok = startHelper(t, "listen", "listening", "ADDR=127.0.0.1:"+strconv.Itoa(ports.Status))
		if !ok || said != "" {
			t.Fatalf("squatter: %q", said)
		}
	})
	code, _ := p.wait(p.started, 20*time.Second)
	want := fmt.Sprintf("is already taken by uid 65534 (nobody), pid %d (helper.test)", helper.Process.Pid)
	if code != 1 || !strings.Contains(p.stderr.String(), "agent.status_port") || !strings.Contains(p.stderr.String(), want) {
		t.Fatalf("exit %d, want 1 naming agent.status_port and %q:\n%s", code, want, p.stderr)
	}
	assertNoEnvoyFor(t, p.dir)
}

// A local user who serves a fake agent on the control socket's path: the
// clients (reload, status) believe only root, their own user or the owner
// of a folder only root could have made, and validate and run refuse a
// control socket in a folder another user could have made or can write.

// startFakeAgent serves a fake agent as uid 65534 on sock (serveFakeAgent);
// it stops when the test ends.
func startFakeAgent(t *testing.T, sock, config string) {
	t.Helper()
	if _, said, ok := startHelper(t, "fakeagent", "listening", "SOCK="+sock, "CONFIG="+config); !ok || said != "" {
		t.Fatalf("fake agent as uid 65534: %q", said)
	}
}

// serveFakeAgent answers every request on sock as an agent that runs
// config would, with its own pid (which SO_PEERCRED confirms), until its
// stdin closes: what the attacker served.
func serveFakeAgent(sock, config string) {
	ln, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("listening")
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		ln.Close()
	}()
	_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Envoy-Agent-Pid", fmt.Sprint(os.Getpid()))
		w.Header().Set("Envoy-Agent-Config", config)
		fmt.Fprint(w, `{"ok":true,"epoch":7,"took_ms":1,"state":"running"}`)
	}))
}

// TestFakeAgentOnTheControlSocketIsNotBelieved: the probe. uid
// 65534 makes a folder in /tmp and serves a fake agent there on the path
// agent.control_socket names; root's reload and status printed the fake's
// "reloaded: epoch 7 is serving (1 ms)" and exited 0.
func TestFakeAgentOnTheControlSocketIsNotBelieved(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("plays another user: needs root")
	}
	fakeDir, err := os.MkdirTemp("/tmp", "envoy-agent-fake-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(fakeDir) })
	if err := os.Chown(fakeDir, int(nobody.Uid), int(nobody.Gid)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(fakeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(fakeDir, "ctl.sock")
	p := startAgentWith(t, procOptions{noWaitReady: true, agent: map[string]string{"control_socket": fmt.Sprintf("%q", sock)}},
		func(envoykit.Ports) {})
	// The agent refuses the folder itself, from the configuration alone,
	// whether or not a fake serves there yet.
	code, _ := p.wait(p.started, 20*time.Second)
	if code != 3 || !strings.Contains(p.stderr.String(), "agent.control_socket") || !strings.Contains(p.stderr.String(), "belongs to uid 65534") {
		t.Fatalf("run: exit %d, want 3 naming agent.control_socket and uid 65534:\n%s", code, p.stderr)
	}
	assertNoEnvoyFor(t, p.dir)
	startFakeAgent(t, sock, p.config)

	tests := []struct {
		args     []string
		wantCode int
		want     []string
	}{
		{[]string{"reload", "--config", p.config}, 1, []string{"belongs to uid 65534", "/tmp"}},
		{[]string{"status", "--config", p.config}, 4, []string{"belongs to uid 65534"}},
		{[]string{"validate", "--config", p.config}, 3, []string{"agent.control_socket", "belongs to uid 65534", "any local user could have made it"}},
	}
	for _, tt := range tests {
		code, out := runBinary(t, nil, agentBin(t), tt.args...)
		if strings.Contains(out, "epoch 7") || strings.Contains(out, "reloaded") {
			t.Errorf("envoy-agent %s believed the fake: exit %d: %s", tt.args[0], code, out)
		}
		if code != tt.wantCode {
			t.Errorf("envoy-agent %s: exit %d, want %d: %s", tt.args[0], code, tt.wantCode, out)
		}
		for _, w := range tt.want {
			if !strings.Contains(out, w) {
				t.Errorf("envoy-agent %s does not say %q: %s", tt.args[0], w, out)
			}
		}
	}
}

// TestFakeAgentInAFolderRootMadeIsNotBelieved: in a folder that passes the
// folder checks (root's, 0755), a process of uid 65534 that serves the
// socket (root loosened nothing but could, say, have run it there) is still
// not believed: only root, the caller and the folder's owner are.
func TestFakeAgentInAFolderRootMadeIsNotBelieved(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("plays another user: needs root")
	}
	dir := t.TempDir()
	openToAll(t, dir)
	sockDir := filepath.Join(dir, "run")
	if err := os.Mkdir(sockDir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sockDir, 0o777); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "config.toml")
	text := fmt.Sprintf("[envoy]\nbinary_path = %q\nadmin_port = 15000\n[agent]\ncontrol_socket = %q\n", envoykit.Binary(t), filepath.Join(sockDir, "control.sock"))
	if err := os.WriteFile(config, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(sockDir, "control.sock")
	startFakeAgent(t, sock, config)

	// A folder anyone can write: refused by validate and the client alike.
	code, out := runBinary(t, nil, agentBin(t), "validate", "--config", config)
	if code != 3 || !strings.Contains(out, "writable by its group or by others (mode 0777)") {
		t.Errorf("validate with a 0777 socket folder: exit %d: %s", code, out)
	}
	code, out = runBinary(t, nil, agentBin(t), "reload", "--config", config)
	if code == 0 || !strings.Contains(out, "writable by its group or by others") {
		t.Errorf("reload with a 0777 socket folder: exit %d: %s", code, out)
	}

	// Root's own 0755 folder: the folder is fine, the server is not.
	if err := os.Chmod(sockDir, 0o755); err != nil {
		t.Fatal(err)
	}
	code, out = runBinary(t, nil, agentBin(t), "reload", "--config", config)
	if code == 0 || !strings.Contains(out, "runs as uid 65534, neither root") || strings.Contains(out, "reloaded") {
		t.Errorf("reload from a uid 65534 server: exit %d: %s; want it not believed", code, out)
	}
}
