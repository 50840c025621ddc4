//go:build linux

package main

// Envoy's hot-restart channel as a local attacker meets it: a
// copy of this test binary, run as uid 65534, speaks Envoy's hot-restart
// protocol to the serving Envoy. Against a bare Envoy (abstract sockets, no
// permissions) it takes a listening socket: that proves the probe works.
// Against the agent's Envoy (--socket-path in the run folder, mode 0600) it
// can neither send a request nor bind the reply socket.

import (
	"encoding/binary"
	"errors"
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

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// Envoy's HotRestartMessage (source/server/hot_restart.proto): request = 1,
// and in a Request pass_listen_socket = 1 (address = 1), drain_listeners =
// 4, terminate = 5. On the wire: an 8-byte big-endian length, then the
// message.
const (
	hrRequest          = 1
	hrPassListenSocket = 1
	hrDrainListeners   = 4
	hrTerminate        = 5
)

func hotRestartRequest(field protowire.Number, inner []byte) []byte {
	var req []byte
	req = protowire.AppendTag(req, field, protowire.BytesType)
	req = protowire.AppendBytes(req, inner)
	var msg []byte
	msg = protowire.AppendTag(msg, hrRequest, protowire.BytesType)
	msg = protowire.AppendBytes(msg, req)
	return append(binary.BigEndian.AppendUint64(nil, uint64(len(msg))), msg...)
}

// abstractEnvoySocket is Envoy's default hot-restart socket name for role
// and number n.
func abstractEnvoySocket(role string, n uint64) string {
	return "@envoy_domain_socket_" + role + "_" + strconv.FormatUint(n, 10)
}

// padAbstract pads an abstract name with NULs to the whole sun_path, as
// Envoy binds it (abstract names match byte for byte).
func padAbstract(name string) string {
	if !strings.HasPrefix(name, "@") {
		return name
	}
	return name + strings.Repeat("\x00", 108-len(name))
}

// hotRestartProbe is the helper "hotrestart": it binds REPLY (the socket
// Envoy answers a child on), sends each request of REQUESTS
// (listener, drain, terminate) to PARENT, and prints one line each:
// "listener: took fd of 127.0.0.1:P", "drain: sent", or the error. Every
// step goes on after an error, so one run reports them all.
func hotRestartProbe() {
	reply, parent := padAbstract(os.Getenv("REPLY")), padAbstract(os.Getenv("PARENT"))
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		fmt.Println("socket:", err)
		return
	}
	bound := syscall.Bind(fd, &syscall.SockaddrUnix{Name: reply})
	fmt.Println("bind reply socket:", errText(bound))
	for _, what := range strings.Split(os.Getenv("REQUESTS"), ",") {
		var msg []byte
		switch what {
		case "listener":
			var addr []byte
			addr = protowire.AppendTag(addr, 1, protowire.BytesType)
			addr = protowire.AppendString(addr, "tcp://"+os.Getenv("LISTENER"))
			msg = hotRestartRequest(hrPassListenSocket, addr)
		case "drain":
			msg = hotRestartRequest(hrDrainListeners, nil)
		case "terminate":
			msg = hotRestartRequest(hrTerminate, nil)
		}
		err := syscall.Sendto(fd, msg, 0, &syscall.SockaddrUnix{Name: parent})
		if err != nil || what != "listener" {
			fmt.Printf("%s: send: %s\n", what, errText(err))
			continue
		}
		if bound != nil {
			fmt.Printf("%s: sent, no reply socket\n", what)
			continue
		}
		fmt.Printf("%s: %s\n", what, receiveListener(fd))
	}
}

// receiveListener waits for Envoy's answer to a listen-socket request and
// says which socket came with it.
func receiveListener(fd int) string {
	tv := syscall.NsecToTimeval((5 * time.Second).Nanoseconds())
	_ = syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	buf, oob := make([]byte, 4096), make([]byte, syscall.CmsgSpace(4))
	_, oobn, _, _, err := syscall.Recvmsg(fd, buf, oob, 0)
	if err != nil {
		return "no answer: " + err.Error()
	}
	msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) == 0 {
		return "answered without a socket"
	}
	fds, err := syscall.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) == 0 {
		return "answered without a socket"
	}
	sa, err := syscall.Getsockname(fds[0])
	if in4, ok := sa.(*syscall.SockaddrInet4); ok && err == nil {
		return fmt.Sprintf("took fd of %s", net.JoinHostPort(net.IP(in4.Addr[:]).String(), strconv.Itoa(in4.Port)))
	}
	return fmt.Sprintf("took fd %d (%v)", fds[0], err)
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return "errno " + strconv.Itoa(int(errno)) + " (" + err.Error() + ")"
	}
	return err.Error()
}

// probeAs runs the hot-restart probe as cred and returns its lines.
func probeAs(t *testing.T, cred *syscall.Credential, parent, reply, listener, requests string) string {
	t.Helper()
	cmd := exec.Command(testBinCopy)
	cmd.Env = append(os.Environ(), helperEnv+"=hotrestart", "PARENT="+parent, "REPLY="+reply,
		"LISTENER="+listener, "REQUESTS="+requests)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("probe as uid %d: %v: %s", cred.Uid, err, out)
	}
	t.Logf("probe as uid %d, parent %s:\n%s", cred.Uid, parent, out)
	return string(out)
}

// TestBareEnvoysHotRestartSocketsAreOpenToAnyUser is the probe's control:
// the same probe that fails against the agent's Envoy takes a listening
// socket from a bare Envoy, whose hot-restart sockets are abstract.
func TestBareEnvoysHotRestartSocketsAreOpenToAnyUser(t *testing.T) {
	dir := t.TempDir()
	ports := envoykit.NewPorts(t)
	up := envoykit.NewUpstream(t)
	ports.Upstream = up.Port
	bootstrap := envoykit.WriteBootstrap(t, dir, "envoy.yaml", envoykit.BootstrapOptions{Ports: ports})
	baseID := envoykit.BaseID()
	out := &envoykit.SyncBuffer{}
	p, err := envoykit.StartEnvoy(envoykit.Binary(t), bootstrap, baseID, out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	if err := p.WaitReady(ports.Admin, 30*time.Second); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	listener := "127.0.0.1:" + strconv.Itoa(ports.Listener)
	got := probeAs(t, nobody, abstractEnvoySocket("parent", uint64(baseID)*10), abstractEnvoySocket("child", uint64(baseID)*10+1), listener, "listener")
	if !strings.Contains(got, "listener: took fd of "+listener) {
		t.Fatalf("uid 65534 did not take the bare Envoy's listener; the probe does not work:\n%s", got)
	}
}

// TestHotRestartSocketsAreTheAgentUsersOnly: the agent's Envoy, in every
// epoch, binds its hot-restart sockets as files, mode 0600, in the run
// folder; uid 65534 can neither take a listener, drain nor terminate it
// (through those files or Envoy's default abstract names), nor bind the
// reply socket; no abstract Envoy socket exists; and Envoy serves on
// through it all with no failed request.
func TestHotRestartSocketsAreTheAgentUsersOnly(t *testing.T) {
	p := startAgent(t, procOptions{})
	baseID := configBaseID(t, p.config)
	runDir := filepath.Join(p.dir, "run")
	// nobody may reach run/, as it may /run: only the run folder's mode
	// (0750, root's) and the sockets' (0600) stand in its way (p.dir is
	// in the temporary directory, which everyone may enter).
	if err := os.Chmod(p.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(p.dir, "run")); err != nil || fi.Mode().Perm()&0o005 != 0 {
		t.Fatalf("run folder: %v, mode %v; want none for others", err, fi.Mode())
	}
	listener := "127.0.0.1:" + strconv.Itoa(p.ports.Listener)
	load := envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: "http://" + listener + "/", Client: envoykit.RawHTTP1,
		Workers: []envoykit.Workers{{N: 2, Idle: 10 * time.Millisecond}}})
	pid := p.envoyPid
	for epoch := range 2 {
		if epoch == 1 {
			if code, out := p.reload(); code != 0 {
				t.Fatalf("reload: exit %d: %s", code, out)
			}
		}
		n := uint64(baseID)*10 + uint64(epoch)
		parent := filepath.Join(runDir, "hot-restart_parent_"+strconv.FormatUint(n, 10))
		fi, err := os.Stat(parent)
		if err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
			t.Fatalf("epoch %d: %s: %v (mode %v); want a socket, mode 0600", epoch, parent, err, fi.Mode())
		}
		child := filepath.Join(runDir, "hot-restart_child_"+strconv.FormatUint(n+1, 10))
		got := probeAs(t, nobody, parent, child, listener, "listener,drain,terminate")
		for _, want := range []string{"bind reply socket: errno 13", "listener: send: errno 13", "drain: send: errno 13", "terminate: send: errno 13"} {
			if !strings.Contains(got, want) {
				t.Errorf("epoch %d, through the run folder: want %q:\n%s", epoch, want, got)
			}
		}
		// Envoy's default names: nobody answers there.
		got = probeAs(t, nobody, abstractEnvoySocket("parent", n), abstractEnvoySocket("child", n+1), listener, "listener,drain,terminate")
		for _, want := range []string{"listener: send: errno 111", "drain: send: errno 111", "terminate: send: errno 111"} {
			if !strings.Contains(got, want) {
				t.Errorf("epoch %d, abstract names: want %q:\n%s", epoch, want, got)
			}
		}
		unix, err := os.ReadFile("/proc/net/unix")
		if err != nil {
			t.Fatal(err)
		}
		for _, role := range []string{"parent", "child"} {
			if name := fmt.Sprintf("@envoy_domain_socket_%s_%d", role, n); strings.Contains(string(unix), name) {
				t.Errorf("epoch %d: /proc/net/unix lists %s", epoch, name)
			}
		}
	}
	// A run folder others may enter (0755 passes the agent's check): the
	// sockets' own mode (0600) still refuses them.
	if err := os.Chmod(runDir, 0o755); err != nil {
		t.Fatal(err)
	}
	n := uint64(baseID)*10 + 1
	got := probeAs(t, nobody, filepath.Join(runDir, "hot-restart_parent_"+strconv.FormatUint(n, 10)),
		filepath.Join(runDir, "hot-restart_child_"+strconv.FormatUint(n+1, 10)), listener, "listener,drain,terminate")
	for _, want := range []string{"bind reply socket: errno 13", "listener: send: errno 13", "drain: send: errno 13", "terminate: send: errno 13"} {
		if !strings.Contains(got, want) {
			t.Errorf("run folder 0755: want %q:\n%s", want, got)
		}
	}
	if err := os.Chmod(runDir, 0o750); err != nil {
		t.Fatal(err)
	}
	load.Stop()
	t.Logf("load through the probes: %s", load)
	if load.Failed() != 0 || load.OK() == 0 {
		t.Fatalf("load through the probes: %s %q; want no failure", load, load.Errors())
	}
	if !envoykit.Alive(pid) {
		t.Fatalf("envoy epoch 0 (pid %d) is gone: the reload should have left it draining", pid)
	}
	if code := p.healthz(); code != 200 {
		t.Fatalf("healthz %d after the probes", code)
	}
}
