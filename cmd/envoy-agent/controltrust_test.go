//go:build linux

package main

// A local user who serves a fake agent on the control socket's path: the
// clients (reload, status) believe only root, their own user or the owner
// of a folder only root could have made, and validate and run refuse a
// control socket in a folder another user could have made or can write.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/testenvoy"
)

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

// startFakeAgent serves a fake agent as uid 65534 on sock; it stops when
// the test ends.
func startFakeAgent(t *testing.T, sock, config string) {
	t.Helper()
	cmd := exec.Command(testBinCopy)
	cmd.Env = append(os.Environ(), helperEnv+"=fakeagent", "SOCK="+sock, "CONFIG="+config)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: nobody}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "listening\n" {
		t.Fatalf("fake agent as uid 65534: %q", line)
	}
}

// runAgentCommand runs `envoy-agent ARGS...` as root and returns its exit
// code and output.
func runAgentCommand(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(agentBin, args...)
	out, err := cmd.CombinedOutput()
	if err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
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
		func(testenvoy.Ports) {})
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
		code, out := runAgentCommand(t, tt.args...)
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
	text := fmt.Sprintf("[envoy]\nbinary_path = %q\nadmin_port = 15000\n[agent]\ncontrol_socket = %q\n", testenvoy.Binary(t), filepath.Join(sockDir, "control.sock"))
	if err := os.WriteFile(config, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(sockDir, "control.sock")
	startFakeAgent(t, sock, config)

	// A folder anyone can write: refused by validate and the client alike.
	code, out := runAgentCommand(t, "validate", "--config", config)
	if code != 3 || !strings.Contains(out, "writable by its group or by others (mode 0777)") {
		t.Errorf("validate with a 0777 socket folder: exit %d: %s", code, out)
	}
	code, out = runAgentCommand(t, "reload", "--config", config)
	if code == 0 || !strings.Contains(out, "writable by its group or by others") {
		t.Errorf("reload with a 0777 socket folder: exit %d: %s", code, out)
	}

	// Root's own 0755 folder: the folder is fine, the server is not.
	if err := os.Chmod(sockDir, 0o755); err != nil {
		t.Fatal(err)
	}
	code, out = runAgentCommand(t, "reload", "--config", config)
	if code == 0 || !strings.Contains(out, "runs as uid 65534, neither root") || strings.Contains(out, "reloaded") {
		t.Errorf("reload from a uid 65534 server: exit %d: %s; want it not believed", code, out)
	}
}
