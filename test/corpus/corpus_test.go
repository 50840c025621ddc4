//go:build linux

package corpus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
	"github.com/envoy-agent/envoy-agent/service/claims"
)

// The requirements each case is held to, in the order they are checked.
const (
	runsUnchanged = "runs unchanged"       // the agent sends READY=1 on the bootstrap as written
	servedAlike   = "served alike"         // its Envoy answers every probe as a bare Envoy does
	editInPlace   = "edit in place"        // `envoy-agent reload` applies the edit in the Envoy that serves (same pid), and it is served
	invalidKept   = "invalid edit refused" // `envoy-agent reload` of an invalid edit fails, the same Envoy serving the same answers
	cleanStop     = "clean stop"           // SIGTERM: exit 0, no Envoy left
)

// knownFailures are the requirements today's agent does not meet, by
// "case: requirement", each with the reason. Delete an entry when the
// mechanism that meets it lands: a listed requirement that is met fails
// the test, so that this list stays true. Where "runs unchanged" fails,
// the test makes the edit by hand a user makes today (an admin on the
// agent's socket, or a TCP admin moved to 127.0.0.1 with admin_port) and
// holds the rest of the case to its requirements.
var knownFailures = map[string]string{
	"user-agent: " + editInPlace: "a bootstrap with no node whose connection managers set add_user_agent runs as it is (the node Envoy needs to read resources from files would be sent upstream), so its reloads hot-restart",
}

// corpusCase is one bootstrap of testdata/ and the requests it is asked.
type corpusCase struct {
	name   string
	edit   string // "route": the route configuration's x-corpus-version; "cluster": the service moves
	probes []probe
}

var corpus = []corpusCase{
	{"front-proxy", "route", []probe{{kind: "http", path: "/service/1"}, {kind: "http", path: "/service/2"}, {kind: "http", path: "/"}}},
	{"tcp-admin", "route", []probe{{kind: "http", path: "/"}}},
	{"tls", "route", []probe{{kind: "http", path: "/", sni: "www.example.com"}}},
	{"sni", "route", []probe{{kind: "http", path: "/", sni: "domain1.example.com"}, {kind: "http", path: "/", sni: "domain2.example.com"},
		{kind: "http", path: "/", sni: "domain3.example.com"}}},
	{"tcp-proxy", "cluster", []probe{{kind: "tcp", path: "/"}}},
	{"udp", "cluster", []probe{{kind: "udp"}}},
	{"lua", "route", []probe{{kind: "http", path: "/"}}},
	{"websocket", "route", []probe{{kind: "ws", path: "/"}, {kind: "http", path: "/"}}},
	{"ext-authz", "route", []probe{{kind: "http", path: "/", header: "Authorization: " + authzToken}, {kind: "http", path: "/"}}},
	{"local-ratelimit", "route", []probe{{kind: "twice", path: "/"}}},
	{"zipkin", "route", []probe{{kind: "http", path: "/trace/1"}, {kind: "http", path: "/"}}},
	{"metrics-through-admin", "route", []probe{{kind: "http", path: "/stats/prometheus"}, {kind: "http", path: "/"}}},
	{"user-agent", "route", []probe{{kind: "http", path: "/service/1", header: "User-Agent: corpus"}, {kind: "http", path: "/service/2"}}},
}

// Bounds of the waits; none is a timing under test.
const (
	// startTimeout is the agent's start_timeout: a bootstrap it cannot
	// start ends its run that soon, instead of after the default 60s.
	startTimeout = 10 * time.Second
	serveWait    = 15 * time.Second // a bare Envoy to take connections
	readyWait    = startTimeout + 20*time.Second
	commandWait  = 2 * time.Minute // `envoy-agent reload` or `status`
	stopWait     = 30 * time.Second
)

var agentBin string

// TestMain builds the agent (or takes $ENVOY_AGENT_BIN, as the other
// packages' tests do) and gives the agents a claims folder of their own.
func TestMain(m *testing.M) {
	if envoykit.UnitTier() {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "corpus-agent-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv(claims.EnvDir, filepath.Join(dir, "claims"))
	if err := os.Mkdir(filepath.Join(dir, "claims"), 0o700); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if agentBin = os.Getenv("ENVOY_AGENT_BIN"); agentBin == "" {
		agentBin = filepath.Join(dir, "envoy-agent")
		build := exec.Command("go", "build", "-o", agentBin, "../../cmd/envoy-agent")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build the agent:", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestKnownFailuresNameCases: every entry of knownFailures names a case
// and a requirement of this file.
func TestKnownFailuresNameCases(t *testing.T) {
	reqs := []string{runsUnchanged, servedAlike, editInPlace, invalidKept, cleanStop}
	for k := range knownFailures {
		name, req, ok := strings.Cut(k, ": ")
		if !ok || !slices.ContainsFunc(corpus, func(c corpusCase) bool { return c.name == name }) || !slices.Contains(reqs, req) {
			t.Errorf("knownFailures has %q: want \"<case>: <requirement>\" with a case of corpus and one of %q", k, reqs)
		}
	}
}

// TestCorpus runs each bootstrap under a bare Envoy, then under the agent,
// and holds the agent to every requirement (knownFailures aside).
func TestCorpus(t *testing.T) {
	for _, c := range corpus {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			runCase(t, c)
		})
	}
}

// verdicts holds a case to its requirements: a requirement met or not is
// an error unless knownFailures says so.
type verdicts struct {
	t    *testing.T
	name string
}

// check reports whether the requirement was met (ok), and fails the test
// when that is not what knownFailures says; it returns ok.
func (v verdicts) check(req string, ok bool, detail string) bool {
	v.t.Helper()
	reason, known := knownFailures[v.name+": "+req]
	switch {
	case ok && known:
		v.t.Errorf("%s: %s: met now; delete it from knownFailures (it said: %s)", v.name, req, reason)
	case ok:
		v.t.Logf("%s: %s: met", v.name, req)
	case known:
		v.t.Logf("%s: %s: not met, as knownFailures says (%s): %s", v.name, req, reason, detail)
	default:
		v.t.Errorf("%s: %s: not met: %s", v.name, req, detail)
	}
	return ok
}

// caseRun is one case's files and services.
type caseRun struct {
	c      corpusCase
	dir    string
	boot   string // the bootstrap
	config string // the agent's TOML
	site   site
	baseID uint32
	byHand func(*yaml.Node) error // nil until an edit by hand is needed
}

func runCase(t *testing.T, c corpusCase) {
	envoyBin := envoykit.Binary(t)
	r := newCaseRun(t, c)
	v := verdicts{t: t, name: c.name}

	want := r.bare(t, envoyBin)
	for i, p := range c.probes {
		t.Logf("%s: a bare Envoy answers %s: %s", c.name, p, want[i])
	}

	// As a new user runs it.
	r.writeConfig(t, 0)
	agent, why := r.startAgent(t)
	if !v.check(runsUnchanged, agent != nil, why) {
		r.editByHand(t)
		if agent, why = r.startAgent(t); agent == nil {
			t.Fatalf("%s: the agent does not run it even with the edits by hand: %s", c.name, why)
		}
	}
	got := askAll(c.probes, r.site.Listener)
	v.check(servedAlike, slices.Equal(got, want), diff(c.probes, got, want))

	// A valid edit.
	pid := r.servingPid(t)
	render(t, c.name, edited(r.site), r.byHand, r.boot)
	code, answer := r.agentCommand(t, "reload")
	if code != 0 {
		t.Fatalf("%s: the edit's reload failed (exit %d): %s", c.name, code, answer)
	}
	afterEdit := askAll(c.probes, r.site.Listener)
	servedEdit := slices.ContainsFunc(afterEdit, func(a string) bool {
		return strings.Contains(a, "x-corpus-version: v2") || strings.Contains(a, "service-b")
	})
	if !servedEdit {
		t.Errorf("%s: the edit is not served: %q", c.name, afterEdit)
	}
	pidAfter := r.servingPid(t)
	v.check(editInPlace, servedEdit && pidAfter == pid && strings.Contains(answer, "reloaded in place"),
		fmt.Sprintf("Envoy pid %d, then %d; `envoy-agent reload` said: %s", pid, pidAfter, answer))

	// An invalid edit.
	render(t, c.name, invalid(r.site), r.byHand, r.boot)
	code, answer = r.agentCommand(t, "reload")
	afterInvalid := askAll(c.probes, r.site.Listener)
	pidInvalid := r.servingPid(t)
	v.check(invalidKept, code != 0 && pidInvalid == pidAfter && slices.Equal(afterInvalid, afterEdit),
		fmt.Sprintf("reload exit %d (%s); Envoy pid %d, then %d; %s", code, answer, pidAfter, pidInvalid, diff(c.probes, afterInvalid, afterEdit)))

	// A stop, as systemd stops the unit.
	envoys := r.envoyPids(t)
	agent.Signal(syscall.SIGTERM)
	stopped := agent.Wait(context.Background(), stopWait) == nil
	exit := -1
	if stopped {
		exit = agent.ExitCode()
	} else {
		agent.Kill()
	}
	left := slices.DeleteFunc(slices.Clone(envoys), func(pid int) bool {
		return envoykit.Eventually(5*time.Second, func() bool { return !envoykit.Alive(pid) })
	})
	v.check(cleanStop, stopped && exit == 0 && len(left) == 0,
		fmt.Sprintf("stopped %v, exit %d, Envoys %v still running of %v", stopped, exit, left, envoys))
}

// newCaseRun makes the case's folder, services, certificates and first
// bootstrap.
func newCaseRun(t *testing.T, c corpusCase) *caseRun {
	dir, err := os.MkdirTemp("", "corpus-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := site{Listener: envoykit.FreePort(t), Admin: envoykit.FreePort(t),
		UpstreamA: upstream(t, "service-a"), UpstreamB: upstream(t, "service-b"),
		UDPA: udpEcho(t, "service-a"), UDPB: udpEcho(t, "service-b"),
		Authz: authz(t), Collector: upstream(t, "zipkin")}
	s.CertA, s.KeyA = writePair(t, dir, "domain1.example.com")
	s.CertB, s.KeyB = writePair(t, dir, "domain2.example.com")
	r := &caseRun{c: c, dir: dir, boot: filepath.Join(dir, "envoy.yaml"), config: filepath.Join(dir, "envoy-agent.toml"), site: s, baseID: envoykit.BaseID()}
	t.Cleanup(func() { envoykit.RemoveSharedMemory(r.baseID) })
	render(t, c.name, first(s), nil, r.boot)
	return r
}

// bare runs the bootstrap under a bare Envoy, as a plain unit runs it, and
// returns its answers.
func (r *caseRun) bare(t *testing.T, envoyBin string) []string {
	t.Helper()
	var out envoykit.SyncBuffer
	p, err := envoykit.StartEnvoy(envoyBin, r.boot, r.baseID, &out)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		p.Signal(syscall.SIGTERM)
		if p.Wait(context.Background(), stopWait) != nil {
			p.Kill()
		}
	}()
	if !envoykit.Eventually(serveWait, func() bool { return r.serving(p) }) {
		t.Fatalf("%s: a bare Envoy does not serve it within %s (running %v): %s", r.c.name, serveWait, p.Running(), out.String())
	}
	return askAll(r.c.probes, r.site.Listener)
}

// serving reports whether Envoy takes connections on the case's listener
// (a UDP one answers a datagram).
func (r *caseRun) serving(p *envoykit.Process) bool {
	if !p.Running() {
		return false
	}
	if r.c.probes[0].kind == "udp" {
		return strings.HasPrefix(askUDP(net.JoinHostPort("127.0.0.1", strconv.Itoa(r.site.Listener))), "udp ")
	}
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(r.site.Listener)), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// writeConfig writes the agent's TOML: the binary and the bootstrap, as a
// new user's; the keys two agents on one host must not share (base_id,
// run_dir, the status and metrics ports); the test's bounds (a short
// start_timeout and stop drain); and admin_port when the edit by hand
// needs it (0: none).
func (r *caseRun) writeConfig(t *testing.T, adminPort int) {
	t.Helper()
	text := fmt.Sprintf("[envoy]\nbinary_path = %q\nconfig_path = %q\nbase_id = %d\n", envoykit.Binary(t), r.boot, r.baseID)
	if adminPort > 0 {
		text += fmt.Sprintf("admin_port = %d\n", adminPort)
	}
	text += fmt.Sprintf("\n[agent]\nrun_dir = %q\nstatus_port = %d\nprometheus_port = %d\nstart_timeout = %q\ntermination_drain_duration = \"1s\"\nmin_drain_duration = \"1s\"\n",
		r.runDir(), envoykit.FreePort(t), envoykit.FreePort(t), startTimeout.String())
	if err := os.WriteFile(r.config, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (r *caseRun) runDir() string { return filepath.Join(r.dir, "run") }

// editByHand makes the edit a user makes today where the agent does not
// run the bootstrap as written: an admin on the agent's default socket
// where there is none, a TCP admin moved to 127.0.0.1 and named by
// admin_port.
func (r *caseRun) editByHand(t *testing.T) {
	t.Helper()
	text, err := os.ReadFile(r.boot)
	if err != nil {
		t.Fatal(err)
	}
	var b struct {
		Admin *struct{} `yaml:"admin"`
	}
	if err := yaml.Unmarshal(text, &b); err != nil {
		t.Fatal(err)
	}
	adminPort := 0
	if b.Admin == nil {
		r.byHand = adminOnSocket(filepath.Join(r.runDir(), "admin.sock"))
	} else {
		r.byHand, adminPort = adminOnLoopback, r.site.Admin
	}
	t.Logf("%s: the edit by hand: %s", r.c.name, map[bool]string{true: "admin moved to 127.0.0.1, admin_port set", false: "an admin on <run_dir>/admin.sock"}[adminPort > 0])
	render(t, r.c.name, first(r.site), r.byHand, r.boot)
	r.writeConfig(t, adminPort)
}

// startAgent runs `envoy-agent run` and waits for its READY=1; when the
// agent exits first, or does not send it within readyWait, it returns nil
// and why (the agent stopped).
func (r *caseRun) startAgent(t *testing.T) (*envoykit.Process, string) {
	t.Helper()
	ns := envoykit.NewNotifySocket(t)
	out := &envoykit.SyncBuffer{}
	p, err := envoykit.Start(agentBin, []string{"run", "--config", r.config}, out, "NOTIFY_SOCKET="+ns.Path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	ctx, cancel := context.WithTimeout(context.Background(), readyWait)
	defer cancel()
	_, err = ns.WaitFrom(ctx, "READY=1", 0, p.Done())
	if err == nil {
		return p, ""
	}
	if p.Running() {
		p.Signal(syscall.SIGTERM)
		if p.Wait(context.Background(), stopWait) != nil {
			p.Kill()
		}
	}
	<-p.Done()
	return nil, fmt.Sprintf("no READY=1 (%v); the agent exited %d: %s", err, p.ExitCode(), lastLines(out.String(), 3))
}

// agentCommand runs `envoy-agent COMMAND --config` and returns its exit
// status and output.
func (r *caseRun) agentCommand(t *testing.T, command string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandWait)
	defer cancel()
	out, err := exec.CommandContext(ctx, agentBin, append([]string{command, "--config", r.config}, args...)...).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), strings.TrimSpace(string(out))
	case err != nil:
		t.Fatalf("envoy-agent %s: %v", command, err)
	}
	return 0, strings.TrimSpace(string(out))
}

// status is what the test reads of `envoy-agent status --json`.
type status struct {
	Epochs []struct {
		Pid  int    `json:"pid"`
		Role string `json:"role"`
	} `json:"epochs"`
}

func (r *caseRun) status(t *testing.T) status {
	t.Helper()
	code, out := r.agentCommand(t, "status", "--json")
	var s status
	if code != 0 {
		t.Fatalf("envoy-agent status: exit %d: %s", code, out)
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("envoy-agent status --json: %v: %s", err, out)
	}
	return s
}

// servingPid is the serving Envoy's pid, as `envoy-agent status` says.
func (r *caseRun) servingPid(t *testing.T) int {
	t.Helper()
	for _, e := range r.status(t).Epochs {
		if e.Role == "serving" {
			return e.Pid
		}
	}
	t.Fatalf("%s: envoy-agent status names no serving Envoy", r.c.name)
	return 0
}

// envoyPids are every Envoy the agent runs now, the draining ones too.
func (r *caseRun) envoyPids(t *testing.T) []int {
	t.Helper()
	var out []int
	for _, e := range r.status(t).Epochs {
		out = append(out, e.Pid)
	}
	return out
}

// diff lists the probes whose answers differ ("" when none do).
func diff(probes []probe, got, want []string) string {
	var b bytes.Buffer
	for i, p := range probes {
		if got[i] != want[i] {
			fmt.Fprintf(&b, "%s: %s, want %s; ", p, got[i], want[i])
		}
	}
	return b.String()
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(l[max(0, len(l)-n):], " | ")
}
