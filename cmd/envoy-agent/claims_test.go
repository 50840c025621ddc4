//go:build linux

package main

// The claims (base id, ports) as a local attacker meets them: uid 65534
// squats the abstract names the agent used to claim them through, answering
// with a made-up agent, and tries to put a claim file of its own in the
// claims directory.

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
	"github.com/envoy-agent/envoy-agent/service/claims"
)

// claimSquat is the helper "squat": it binds each abstract name of NAMES
// (comma-separated) and answers every connection with a made-up agent,
// creates CLAIM (a claim file) if it can, prints one line for each, then
// "squatting" and holds everything until its stdin closes.
func claimSquat() {
	// DGRAM_NAMES: abstract datagram names bound as Envoy binds its default
	// hot-restart sockets (padded with NULs to the whole sun_path).
	for _, name := range strings.Split(os.Getenv("DGRAM_NAMES"), ",") {
		if name == "" {
			continue
		}
		fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_DGRAM, 0)
		if err == nil {
			err = syscall.Bind(fd, &syscall.SockaddrUnix{Name: "@" + name + strings.Repeat("\x00", 107-len(name))})
		}
		fmt.Printf("bind dgram @%s: %s\n", name, errText(err))
	}
	for _, name := range strings.Split(os.Getenv("NAMES"), ",") {
		if name == "" {
			continue
		}
		ln, err := net.Listen("unix", name)
		fmt.Printf("bind %s: %s\n", name, errText(err))
		if err != nil {
			continue
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				fmt.Fprintln(c, `{"pid":1,"config":"/etc/envoy-agent/edge.toml","instance":"edge"}`)
				c.Close()
			}
		}()
	}
	if os.Getenv("CLAIM") == "" {
		fmt.Println("squatting")
		_, _ = bufio.NewReader(os.Stdin).ReadString(0)
		return
	}
	f, err := os.OpenFile(os.Getenv("CLAIM"), os.O_RDWR|os.O_CREATE, 0o666)
	fmt.Printf("create claim file: %s\n", errText(err))
	if err == nil {
		fmt.Fprintln(f, `{"pid":1,"config":"/etc/envoy-agent/edge.toml","instance":"edge"}`)
	}
	fmt.Println("squatting")
	_, _ = bufio.NewReader(os.Stdin).ReadString(0)
}

// TestClaimsCannotBeSquatted: with uid 65534 holding the old abstract claim
// names of a base id and its ports (answering as a made-up agent) and
// trying to write a claim file, an agent with that base id starts and
// serves; a second agent with the same base id is refused, naming the real
// first agent, not the made-up one.
func TestClaimsCannotBeSquatted(t *testing.T) {
	baseID := envoykit.BaseID()
	claimsDir := os.Getenv(claims.EnvDir)
	names := fmt.Sprintf("@envoy-agent/base-id/%d", baseID)
	_, said, _ := startHelper(t, "squat", "squatting", "NAMES="+names, "CLAIM="+filepath.Join(claimsDir, fmt.Sprintf("base-id-%d", baseID)))
	t.Logf("the squatter (uid 65534):\n%s", said)
	if !strings.Contains(said, "bind "+names+": ok") {
		t.Fatalf("the squatter could not bind the abstract name; the test proves nothing:\n%s", said)
	}
	if !strings.Contains(said, "create claim file: errno 13") {
		t.Fatalf("uid 65534 could write in the claims directory %s:\n%s", claimsDir, said)
	}

	first := startAgent(t, procOptions{envoy: map[string]string{"base_id": fmt.Sprint(baseID)}})
	if first.healthz() != 200 {
		t.Fatalf("the agent under the squat is not ready")
	}
	second := startAgent(t, procOptions{noWaitReady: true, envoy: map[string]string{"base_id": fmt.Sprint(baseID)}})
	code, _ := second.wait(second.started, 30*time.Second)
	out := second.stderr.String()
	want := fmt.Sprintf("base_id %d is already used by the envoy-agent running with %s (pid %d)", baseID, first.config, first.proc.Pid())
	if code != 3 || !strings.Contains(out, want) || strings.Contains(out, "edge") {
		t.Fatalf("second agent exited %d, want 3 naming the first agent (%q), not the squatter's:\n%s", code, want, out)
	}
}

// TestSquattedHotRestartNamesDoNotStopAStart: uid 65534 binds the abstract
// names an Envoy run without --socket-path binds for the agent's base id
// (@envoy_domain_socket_parent_N, _child_N, padded as Envoy pads them), one
// python line away for any local user. The agent's Envoy uses --socket-path,
// so the names prove nothing: the agent starts and serves. (It once exited 3,
// "base_id N is already used by an Envoy on this host that no envoy-agent
// runs", and the unit's RestartPreventExitStatus=3 kept it down for good.)
func TestSquattedHotRestartNamesDoNotStopAStart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the squatter runs as uid 65534")
	}
	t.Parallel()
	baseID := envoykit.BaseID()
	var names []string
	for n := range uint64(10) {
		for _, role := range []string{"parent", "child"} {
			names = append(names, fmt.Sprintf("envoy_domain_socket_%s_%d", role, uint64(baseID)*10+n))
		}
	}
	_, said, _ := startHelper(t, "squat", "squatting", "DGRAM_NAMES="+strings.Join(names, ","))
	if !strings.Contains(said, "bind dgram @"+names[0]+": ok") {
		t.Fatalf("uid 65534 could not bind the abstract names; the test proves nothing:\n%s", said)
	}
	p := startAgent(t, procOptions{noWaitReady: true, envoy: map[string]string{"base_id": fmt.Sprint(baseID)}})
	if !envoykit.Eventually(30*time.Second, func() bool { return p.healthz() == 200 }) {
		code, _ := p.wait(p.started, 5*time.Second)
		t.Fatalf("with uid 65534 holding @%s, the agent is not ready (exit %d):\n%s", names[0], code, p.stderr.String())
	}
	t.Logf("uid 65534 holds %d abstract hot-restart names of base_id %d; the agent serves", len(names), baseID)
}

// TestSquattedClaimsDirDoesNotStopAStart: an agent run by an ordinary user
// (uid 65533, no $XDG_RUNTIME_DIR) kept its claims in
// envoy-agent-claims-65533 in the temporary directory, which uid 65534 made
// first (mode 0777): the start failed ("claims directory ... is writable by
// its group or by others", later "belongs to uid 65534"). Now the agent
// never looks in the temporary folder: it keeps its claims in its own cache
// folder and serves; with a home of /nonexistent (the packaged user's) and
// no folder of its own, it refuses to start (exit 3) naming the folders it
// tried and ENVOY_AGENT_CLAIMS_DIR, and uid 65534's folder plays no part.
func TestSquattedClaimsDirDoesNotStopAStart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the agent runs as uid 65533 and the squatter as uid 65534")
	}
	t.Parallel()
	const agentUid = 65533
	home := shortTempDir(t)
	if err := os.Chmod(home, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(home, "tmp") // a shared, sticky temporary directory
	if err := os.Mkdir(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmp, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	squatted := filepath.Join(tmp, fmt.Sprintf("envoy-agent-claims-%d", agentUid))
	mk := exec.Command("sh", "-c", "umask 0; mkdir "+squatted)
	mk.SysProcAttr = &syscall.SysProcAttr{Credential: nobody}
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("uid 65534 could not make %s: %v %s", squatted, err, out)
	}
	for _, d := range []string{"run", "home"} {
		if err := os.Mkdir(filepath.Join(home, d), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(filepath.Join(home, d), agentUid, agentUid); err != nil {
			t.Fatal(err)
		}
	}
	p := startAgent(t, procOptions{noWaitReady: true, cred: &syscall.Credential{Uid: agentUid, Gid: agentUid},
		agent: map[string]string{"run_dir": strconv.Quote(filepath.Join(home, "run"))},
		env: []string{claims.EnvDir + "=", "XDG_RUNTIME_DIR=", "XDG_CACHE_HOME=", "STATE_DIRECTORY=",
			"TMPDIR=" + tmp, "HOME=" + filepath.Join(home, "home")}})
	if !envoykit.Eventually(30*time.Second, func() bool { return p.healthz() == 200 }) {
		code, _ := p.wait(p.started, 5*time.Second)
		t.Fatalf("with uid 65534's %s (mode 0777), the agent of uid %d is not ready (exit %d):\n%s", squatted, agentUid, code, p.stderr.String())
	}
	kept := filepath.Join(home, "home", ".cache", "envoy-agent-claims")
	if _, err := os.Stat(filepath.Join(kept, fmt.Sprintf("base-id-%d", configBaseID(t, p.config)))); err != nil {
		t.Fatalf("the base id claim is not in %s: %v", kept, err)
	}
	t.Logf("uid 65534 squats %s; the agent keeps its claims in %s and serves", squatted, kept)
	p.wait(p.signal(syscall.SIGTERM), 30*time.Second)

	// The packaged user's home, /nonexistent: no cache folder either.
	p = startAgent(t, procOptions{noWaitReady: true, cred: &syscall.Credential{Uid: agentUid, Gid: agentUid},
		agent: map[string]string{"run_dir": strconv.Quote(filepath.Join(home, "run"))},
		env: []string{claims.EnvDir + "=", "XDG_RUNTIME_DIR=", "XDG_CACHE_HOME=", "STATE_DIRECTORY=",
			"TMPDIR=" + tmp, "HOME=/nonexistent"}})
	code, _ := p.wait(p.started, 30*time.Second)
	out := p.stderr.String()
	if code != 3 || !strings.Contains(out, claims.EnvDir) || strings.Contains(out, squatted) || strings.Contains(out, "uid 65534") {
		t.Fatalf("with HOME=/nonexistent: exit %d, want 3 naming %s and not %s:\n%s", code, claims.EnvDir, squatted, out)
	}
	t.Logf("with HOME=/nonexistent: %s", strings.TrimSpace(out))
}
