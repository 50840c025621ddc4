//go:build linux

package main

// The one harness of this package's tests: TestMain builds the envoy-agent
// binary once; startAgent runs it on a real Envoy with a real unix datagram
// socket as NOTIFY_SOCKET, and agentProc drives and reads it; a copy of this
// test binary plays other users (helperMain); and the helpers every file
// shares: running a binary to completion, writing and replacing files,
// finding the processes a test left.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
	"github.com/envoy-agent/envoy-agent/internal/hostfiles"
	"github.com/envoy-agent/envoy-agent/service/claims"
)

// builtAgent is the envoy-agent binary TestMain built; "" in the fast tier.
var builtAgent string

// agentBin is the envoy-agent binary the tests run; a test that runs it
// skips in the fast tier (make test-unit), which builds none.
func agentBin(t testing.TB) string {
	t.Helper()
	if builtAgent == "" {
		t.Skip("runs the envoy-agent binary: make test (this is make test-unit, which builds none)")
	}
	return builtAgent
}

func TestMain(m *testing.M) {
	if helperMain() {
		return
	}
	dir, err := os.MkdirTemp("", "envoy-agent-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Other users may run it too (the unreadable-configuration test).
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The fast tier builds no agent: the tests that run it skip there
	// (agentBin).
	if !envoykit.UnitTier() {
		builtAgent = filepath.Join(dir, "envoy-agent")
	}
	// The agents these tests start see each other's claims, and no one
	// else's (other test runs on the host share /run/envoy-agent-claims).
	os.Setenv(claims.EnvDir, filepath.Join(dir, "claims"))
	if err := os.Mkdir(filepath.Join(dir, "claims"), 0o700); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if builtAgent != "" {
		if err := buildAgent(builtAgent); err != nil {
			fmt.Fprintln(os.Stderr, "build envoy-agent:", err)
			os.Exit(1)
		}
	}
	if err := copyTestBinary(dir); err != nil {
		fmt.Fprintln(os.Stderr, "copy the test binary:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// agentBinEnv names an envoy-agent binary built beforehand for the tests to
// run instead of building one: a test binary cross-compiled for another
// architecture (make test-arm64) has no toolchain of its own to build with.
const agentBinEnv = "ENVOY_AGENT_BIN"

// buildAgent puts the envoy-agent binary the tests run at path: a copy of
// $ENVOY_AGENT_BIN when it is set, else `go build` of this package.
func buildAgent(path string) error {
	if prebuilt := os.Getenv(agentBinEnv); prebuilt != "" {
		data, err := os.ReadFile(prebuilt)
		if err != nil {
			return fmt.Errorf("%s: %w", agentBinEnv, err)
		}
		return os.WriteFile(path, data, 0o755)
	}
	build := exec.Command("go", "build", "-o", path, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	return build.Run()
}

type procOptions struct {
	envoy, agent  map[string]string // TOML values for [envoy] and [agent], over the defaults
	bootstrap     envoykit.BootstrapOptions
	watchdogUsec  int
	noWaitReady   bool
	configText    string              // the whole TOML file instead, when set
	bootstrapFile string              // an existing bootstrap instead, when set
	stderrFile    *os.File            // the agent's stderr instead of a buffer, when set
	env           []string            // more environment for the agent
	binary        string              // the agent binary to run instead of agentBin, when set
	cred          *syscall.Credential // run the agent as this user instead of root, when set
}

type agentProc struct {
	t        *testing.T
	proc     *envoykit.Process // the agent, started by the kit
	ns       *envoykit.NotifySocket
	ports    envoykit.Ports
	upstream *envoykit.Upstream
	dir      string
	config   string
	stderr   *envoykit.SyncBuffer
	started  time.Time
	done     <-chan struct{} // closed once the agent has exited
	envoyPid int
}

func startAgent(t *testing.T, o procOptions) *agentProc {
	t.Helper()
	return startAgentWith(t, o, nil)
}

// startAgentWith is startAgent with a hook that runs once the ports are
// chosen, before the agent starts.
func startAgentWith(t *testing.T, o procOptions, beforeStart func(envoykit.Ports)) *agentProc {
	t.Helper()
	up := envoykit.NewUpstream(t)
	ports := envoykit.NewPorts(t)
	ports.Upstream = up.Port
	dir := shortTempDir(t)
	bo := o.bootstrap
	bo.Ports = ports
	bootstrap := o.bootstrapFile
	if bootstrap == "" {
		bootstrap = envoykit.WriteBootstrap(t, dir, "envoy.yaml", bo)
	}
	text := o.configText
	if text == "" {
		baseID := envoykit.BaseID()
		t.Cleanup(func() { removeSharedMemory(t, baseID) })
		envoyKeys := map[string]string{
			"binary_path": strconv.Quote(envoykit.Binary(t)), "config_path": strconv.Quote(bootstrap),
			"admin_port": strconv.Itoa(ports.Admin), "base_id": fmt.Sprint(baseID), "concurrency": "1",
			"log_level": `"warning"`, "drain_duration": `"10s"`, "parent_shutdown_duration": `"15s"`,
		}
		agentKeys := map[string]string{
			"status_port": strconv.Itoa(ports.Status), "prometheus_port": strconv.Itoa(ports.Prometheus),
			"termination_drain_duration": `"10s"`, "min_drain_duration": `"1s"`, "run_dir": `"run"`,
			// The tests of the hot restart's own behaviour (epochs, the
			// wait for a draining one) choose it; "" tests the default.
			"reload_method": `"hot_restart"`,
		}
		maps.Copy(envoyKeys, o.envoy)
		maps.Copy(agentKeys, o.agent)
		// An empty value leaves the key out.
		maps.DeleteFunc(envoyKeys, func(_, v string) bool { return v == "" })
		maps.DeleteFunc(agentKeys, func(_, v string) bool { return v == "" })
		text = "[envoy]\n" + tomlLines(envoyKeys) + "\n[agent]\n" + tomlLines(agentKeys)
	}
	config := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(config, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &agentProc{t: t, ports: ports, upstream: up, dir: dir, config: config, stderr: &envoykit.SyncBuffer{}}
	p.ns = envoykit.NewNotifySocket(t)
	bin := agentBin(t)
	if o.binary != "" {
		bin = o.binary
	}
	env := []string{"NOTIFY_SOCKET=" + p.ns.Path}
	if o.watchdogUsec > 0 {
		env = append(env, "WATCHDOG_USEC="+strconv.Itoa(o.watchdogUsec))
	}
	if o.cred != nil {
		if err := os.Chmod(dir, 0o755); err != nil { // MkdirTemp's are 0700
			t.Fatal(err)
		}
	}
	env = append(env, o.env...)
	var out io.Writer = p.stderr
	if o.stderrFile != nil {
		out = o.stderrFile
	}
	if beforeStart != nil {
		beforeStart(ports)
	}
	proc, err := envoykit.StartAs(o.cred, bin, []string{"run", "--config", config}, out, env...)
	if err != nil {
		t.Fatal(err)
	}
	p.proc, p.started, p.done = proc, proc.Started(), proc.Done()
	t.Cleanup(func() {
		if p.envoyPid > 0 {
			_ = syscall.Kill(p.envoyPid, syscall.SIGCONT)
		}
		p.proc.Kill()
		// Envoy dies by its parent-death signal (SIGKILL); on a machine busy with
		// other suites one took more than 5 s to be gone.
		if p.envoyPid > 0 && !envoykit.Eventually(20*time.Second, func() bool { return !envoykit.Alive(p.envoyPid) }) {
			stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.envoyPid))
			t.Errorf("envoy pid %d outlived the test's agent by 20 s (/proc/PID/stat: %s)", p.envoyPid, stat)
		}
		if t.Failed() {
			t.Logf("agent stderr:\n%s", p.stderr)
		}
	})
	if !o.noWaitReady {
		p.waitReady()
	}
	return p
}

// shortTempDir is a temporary folder removed when the test ends, with a
// short name: t.TempDir's name carries the test's, and the run folder
// inside must leave room for Envoy's hot-restart socket names (107 bytes
// in all).
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "agent-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// removeSharedMemory removes the hot-restart shared memory of baseID, which
// an agent that was SIGKILLed (or that a test stopped uncleanly) leaves in
// /dev/shm. It runs after the agent's own clean-up (registered earlier, so
// run later by t.Cleanup's last-in-first-out order), once no Envoy is left.
func removeSharedMemory(t *testing.T, baseID uint32) {
	path := hostfiles.SharedMemoryPath(baseID)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Errorf("remove %s: %v", path, err)
	}
}

func tomlLines(kv map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(kv)) {
		fmt.Fprintf(&b, "%s = %s\n", k, kv[k])
	}
	return b.String()
}

var pidRE = regexp.MustCompile(`Envoy pid (\d+)`)

// readyWaitEnv sets how long a test waits for the agent's READY=1 (a Go
// duration; 30s when unset). It bounds a wait, and no test measures it:
// make test-arm64 raises it, since an emulated Envoy on a loaded machine can
// take longer than 30s to be LIVE.
const readyWaitEnv = "ENVOY_AGENT_READY_WAIT"

func readyWait() time.Duration {
	if d, err := time.ParseDuration(os.Getenv(readyWaitEnv)); err == nil && d > 0 {
		return d
	}
	return 30 * time.Second
}

// waitReady waits for READY=1 and learns Envoy's pid from its STATUS.
func (p *agentProc) waitReady() envoykit.Message {
	p.t.Helper()
	var m envoykit.Message
	found := false
	envoykit.Eventually(readyWait(), func() bool {
		for _, msg := range p.ns.Messages() {
			if envoykit.HasAssignment(msg.Text, "READY=1") {
				m, found = msg, true
				return true
			}
		}
		return !p.proc.Running()
	})
	switch {
	case !found && !p.proc.Running():
		p.t.Fatalf("the agent exited %d before READY=1", p.proc.ExitCode())
	case !found:
		p.t.Fatalf("no READY=1 within %s; got %v", readyWait(), p.ns.Messages())
	}
	if sm := pidRE.FindStringSubmatch(m.Text); sm != nil {
		p.envoyPid, _ = strconv.Atoi(sm[1])
	}
	if p.envoyPid == 0 {
		p.t.Fatalf("READY datagram %q names no Envoy pid", m.Text)
	}
	return m
}

// wait waits for the agent to exit and returns its exit code and how long
// after since it exited.
func (p *agentProc) wait(since time.Time, within time.Duration) (int, time.Duration) {
	p.t.Helper()
	select {
	case <-p.done:
		return p.proc.ExitCode(), time.Since(since)
	case <-time.After(within):
		p.t.Fatalf("agent still running %s later", within)
		return 0, 0
	}
}

func (p *agentProc) signal(sig syscall.Signal) time.Time {
	p.t.Helper()
	if err := syscall.Kill(p.proc.Pid(), sig); err != nil {
		p.t.Fatalf("signal agent: %v", err)
	}
	return time.Now()
}

// post POSTs path on the agent's control socket, as root (the test).
func (p *agentProc) post(path string) int {
	p.t.Helper()
	code, err := controlRequest(p.controlSocket(), http.MethodPost, path)
	if err != nil {
		p.t.Fatalf("POST %s: %v", path, err)
	}
	return code
}

func (p *agentProc) healthz() int {
	r, err := envoykit.Get(envoykit.URL(p.ports.Status, "/healthz/ready"), 5*time.Second)
	if err != nil {
		return 0
	}
	return r.Code
}

// logged waits until the agent's log holds want: a test that saw an event
// on another channel (STATUS= on the notify socket, an answer, an exit) can
// read the log before the pipe's copy of the line that came first has
// reached the buffer (TestNoticesTheInstalledEnvoyIsNotTheRunningOne failed
// so in a fresh-clone make test).
func (p *agentProc) logged(want string) bool {
	return envoykit.Eventually(5*time.Second, func() bool { return strings.Contains(p.stderr.String(), want) })
}

// assertNoEnvoyFor fails when a process runs with a command line naming
// something in dir (the test's bootstrap).
func assertNoEnvoyFor(t *testing.T, dir string) {
	t.Helper()
	if !envoykit.Eventually(3*time.Second, func() bool { return len(processesMentioning(dir)) == 0 }) {
		t.Fatalf("processes left running for %s: %v", dir, processesMentioning(dir))
	}
}

// processesMentioning are the live processes (zombies left out) other than
// this one whose command line names s: their command lines (the arguments
// joined by spaces) by pid.
func processesMentioning(s string) map[int]string {
	out := map[int]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(s)) && envoykit.Alive(pid) {
			out[pid] = strings.ReplaceAll(string(b), "\x00", " ")
		}
	}
	return out
}

// quickDrain makes replaced epochs go away fast: 1s drain, told to exit at 2s.
var quickDrain = map[string]string{"drain_duration": `"1s"`, "parent_shutdown_duration": `"2s"`}

// rewriteBootstrap replaces the agent's bootstrap atomically, as an editor
// or a config management tool would.
func (p *agentProc) rewriteBootstrap(o envoykit.BootstrapOptions) {
	p.t.Helper()
	o.Ports = p.ports
	tmp := envoykit.WriteBootstrap(p.t, p.dir, ".envoy.yaml.new", o)
	if err := os.Rename(tmp, filepath.Join(p.dir, "envoy.yaml")); err != nil {
		p.t.Fatal(err)
	}
}

func (p *agentProc) reload() (int, string) {
	p.t.Helper()
	code, stdout, stderr := runAgent(p.t, "reload", "--config", p.config)
	return code, stdout + stderr
}

func (p *agentProc) metric(name string) string {
	p.t.Helper()
	r, err := envoykit.Get(envoykit.URL(p.ports.Prometheus, "/stats/prometheus"), 5*time.Second)
	if err != nil {
		p.t.Fatalf("metrics: %v", err)
	}
	for _, line := range strings.Split(r.Body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

// lastStatus is the STATUS= of the last datagram that had one.
func (p *agentProc) lastStatus() string {
	status := ""
	for _, m := range p.ns.Messages() {
		for _, line := range strings.Split(m.Text, "\n") {
			if v, ok := strings.CutPrefix(line, "STATUS="); ok {
				status = v
			}
		}
	}
	return status
}

// waitStatus waits until the latest STATUS= has every one of want (the
// agent looks at the installed Envoy every 5 s).
func (p *agentProc) waitStatus(within time.Duration, want ...string) string {
	p.t.Helper()
	has := func() bool {
		s := p.lastStatus()
		for _, w := range want {
			if !strings.Contains(s, w) {
				return false
			}
		}
		return true
	}
	if !envoykit.Eventually(within, has) {
		p.t.Fatalf("STATUS= never had %q within %s; the last one: %q", want, within, p.lastStatus())
	}
	return p.lastStatus()
}

// configBaseID reads envoy.base_id back from a test's config.toml.
func configBaseID(t *testing.T, config string) uint32 {
	t.Helper()
	data, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "base_id = "); ok {
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil {
				t.Fatal(err)
			}
			return uint32(n)
		}
	}
	t.Fatalf("no base_id in %s", config)
	return 0
}

// helperEnv makes this test binary a helper instead of running tests:
// "request" sends one request to a control socket and prints "code N" or
// "error: ..."; "listen" holds a TCP port until its stdin closes;
// "fakeagent" serves a fake agent on a control socket (serveFakeAgent).
const helperEnv = "ENVOY_AGENT_TEST_HELPER"

// testBinCopy is this test binary, copied where other users can run it.
var testBinCopy string

func copyTestBinary(dir string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	data, err := os.ReadFile(self)
	if err != nil {
		return err
	}
	testBinCopy = filepath.Join(dir, "helper.test")
	return os.WriteFile(testBinCopy, data, 0o755)
}

func helperMain() bool {
	switch os.Getenv(helperEnv) {
	case "request":
		code, err := controlRequest(os.Getenv("SOCK"), os.Getenv("METHOD"), os.Getenv("ROUTE"))
		if err != nil {
			fmt.Println("error:", err)
		} else {
			fmt.Println("code", code)
		}
	case "listen":
		ln, err := net.Listen("tcp", os.Getenv("ADDR"))
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("listening")
		_, _ = io.Copy(io.Discard, os.Stdin)
		ln.Close()
	case "hotrestart":
		hotRestartProbe()
	case "squat":
		claimSquat()
	case "fakeagent":
		serveFakeAgent(os.Getenv("SOCK"), os.Getenv("CONFIG"))
	default:
		return false
	}
	os.Exit(0)
	return true
}

// controlRequest sends one request to a control socket, as the caller.
func controlRequest(sock, method, route string) (int, error) {
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	req, err := http.NewRequest(method, "http://envoy-agent"+route, nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// nobody is uid 65534 with no other group; nobodyInAgentGroup is the same
// user with root's group (the agent under test runs as root, so gid 0 is
// the service group) as a supplementary group.
var (
	nobody             = &syscall.Credential{Uid: 65534, Gid: 65534}
	nobodyInAgentGroup = &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{0}}
)

func (p *agentProc) controlSocket() string { return filepath.Join(p.dir, "run", "control.sock") }

// reloadAs runs `envoy-agent reload` as cred.
func (p *agentProc) reloadAs(cred *syscall.Credential) (int, string) {
	p.t.Helper()
	return runBinary(p.t, cred, agentBin(p.t), "reload", "--config", p.config)
}

// startHelper starts this test binary (its copy others can run) as uid
// 65534 to play role (helperMain), with env added to its environment, and
// reads what it says up to the line ready. The helper holds what it took
// until its stdin closes, when the test ends. It returns the helper, what
// it said before ready, and whether it said ready at all (false: it exited
// first).
func startHelper(t *testing.T, role, ready string, env ...string) (helper *exec.Cmd, said string, ok bool) {
	t.Helper()
	helper = exec.Command(testBinCopy)
	helper.Env = append(append(os.Environ(), helperEnv+"="+role), env...)
	helper.SysProcAttr = &syscall.SysProcAttr{Credential: nobody}
	stdin, err := helper.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); _ = helper.Wait() })
	var b strings.Builder
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if sc.Text() == ready {
			return helper, b.String(), true
		}
		b.WriteString(sc.Text() + "\n")
	}
	return helper, b.String(), false
}

// runAgent runs the binary to completion and returns its exit code, stdout
// and stderr.
func runAgent(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(agentBin(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("envoy-agent %v did not exit within 60s", args)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// runBinary runs `bin ARGS...` to completion, as cred when it is set (else
// as the test's user, root), and returns its exit code and its output
// (stdout and stderr as they came); it fails the test when bin does not
// start.
func runBinary(t *testing.T, cred *syscall.Credential, bin string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	out, err := cmd.CombinedOutput()
	if err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFileT(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// replaceFile puts data at path, with mode perm, as a package manager or
// a certificate renewal does: a new file renamed over the old one, so a
// process that has the old one open keeps its own.
func replaceFile(t *testing.T, path string, data []byte, perm os.FileMode) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
