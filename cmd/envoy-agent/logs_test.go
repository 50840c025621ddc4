//go:build linux

package main

// Logs: journal priorities on the agent's stderr, and Envoy's log files reopened for logrotate.

import (
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// journalStream makes f look like the journal stream systemd gives a service: JOURNAL_STREAM
// names its device and inode, which is all the agent checks.
func journalStream(t *testing.T, f *os.File) string {
	t.Helper()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return fmt.Sprintf("JOURNAL_STREAM=%d:%d", st.Dev, st.Ino)
}

var priorityRE = regexp.MustCompile(`^<([0-7])>`)

// TestJournalPriorities runs the agent with its stderr a "journal stream" and checks that every
// line carries a priority: the agent's by its level, Envoy's by Envoy's level, a failed reload's
// reason as an error (from the agent and from `envoy-agent reload` under the unit's ExecReload=).
func TestJournalPriorities(t *testing.T) {
	t.Parallel()
	stderr, err := os.Create(filepath.Join(t.TempDir(), "journal"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	js := journalStream(t, stderr)
	envoyKeys := maps.Clone(quickDrain)
	envoyKeys["log_level"] = `"info"`
	p := startAgent(t, procOptions{envoy: envoyKeys, stderrFile: stderr, env: []string{js}})

	bootstrap := filepath.Join(p.dir, "envoy.yaml")
	good, err := os.ReadFile(bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, bootstrap, strings.Replace(string(good), "type: STATIC", "type: NOT_A_TYPE", 1))
	reload := exec.Command(agentBin(t), "reload", "--config", p.config)
	reloadErr, err := os.Create(filepath.Join(t.TempDir(), "reload-journal"))
	if err != nil {
		t.Fatal(err)
	}
	defer reloadErr.Close()
	reload.Stderr = reloadErr
	reload.Env = append(os.Environ(), journalStream(t, reloadErr))
	if err := reload.Run(); err == nil {
		t.Fatal("a reload with a bootstrap Envoy rejects succeeded")
	}
	writeFile(t, bootstrap, string(good))

	read := func(f *os.File) string {
		b, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if !envoykit.Eventually(10*time.Second, func() bool { return strings.Contains(read(stderr), "reload failed") }) {
		t.Fatalf("no reload failure in the agent's log:\n%s", read(stderr))
	}
	p.signal(syscall.SIGTERM)
	if code, _ := p.wait(time.Now(), 30*time.Second); code != 0 {
		t.Fatalf("agent exit %d", code)
	}

	// What a line must start with, by what it says.
	checks := []struct {
		what, contains, prefix string
	}{
		{"the agent's info", "level=info msg=\"envoy is LIVE", "<6>"},
		{"the agent's reload failure", "reload failed", "<3>"},
		{"Envoy's info", "][info][main]", "<6>["},
		{"Envoy's warning", "][warning][", "<4>["},
	}
	lines := strings.Split(strings.TrimSuffix(read(stderr), "\n"), "\n")
	for _, c := range checks {
		found := false
		for _, l := range lines {
			if strings.Contains(l, c.contains) {
				found = true
				if !strings.HasPrefix(l, c.prefix) {
					t.Errorf("%s: line %q does not start with %q", c.what, l, c.prefix)
				}
			}
		}
		if !found {
			t.Errorf("%s: no line with %q", c.what, c.contains)
		}
	}
	for _, l := range lines {
		if !priorityRE.MatchString(l) {
			t.Errorf("line without a priority: %q", l)
		}
	}
	reloadLines := strings.Split(strings.TrimSuffix(read(reloadErr), "\n"), "\n")
	if len(reloadLines) == 0 || !strings.Contains(reloadLines[0], "reload failed") {
		t.Errorf("envoy-agent reload printed %q, want the reason", reloadLines)
	}
	for _, l := range reloadLines {
		if !strings.HasPrefix(l, "<3>") {
			t.Errorf("envoy-agent reload: line %q is not marked as an error (<3>)", l)
		}
	}
	if t.Failed() {
		t.Logf("agent's journal stream:\n%s", read(stderr))
	}
}

// accessLogPaths reads the request paths an access log holds, one a line.
func accessLogPaths(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// envoyLogFiles lists, per Envoy process of the agent, the files its descriptors name that
// start with prefix.
func envoyLogFiles(t *testing.T, agentPid int, prefix string) map[int][]string {
	t.Helper()
	out := map[int][]string{}
	kids, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, st := range kids {
		b, err := os.ReadFile(st)
		if err != nil {
			continue
		}
		f := strings.Fields(string(b)[strings.LastIndexByte(string(b), ')')+1:])
		if len(f) < 2 || f[1] != fmt.Sprint(agentPid) {
			continue
		}
		var pid int
		fmt.Sscanf(filepath.Base(filepath.Dir(st)), "%d", &pid)
		fds, _ := filepath.Glob(filepath.Join(filepath.Dir(st), "fd", "*"))
		out[pid] = nil
		for _, fd := range fds {
			if target, err := os.Readlink(fd); err == nil && strings.HasPrefix(target, prefix) {
				out[pid] = append(out[pid], target)
			}
		}
	}
	return out
}

// TestReopenLogsAfterRotation renames Envoy's access log under load, as logrotate does, and has
// the agent make Envoy reopen it: with `envoy-agent reopen-logs`, then with SIGUSR1 while a
// replaced epoch is still draining. Every request is logged once, in the old file or the new one.
func TestReopenLogsAfterRotation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	accessLog := filepath.Join(dir, "access.log")
	envoyKeys := map[string]string{"drain_duration": `"20s"`, "parent_shutdown_duration": `"30s"`}
	p := startAgent(t, procOptions{envoy: envoyKeys, bootstrap: envoykit.BootstrapOptions{AccessLog: accessLog}})
	l := envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: envoykit.URL(p.ports.Listener, "/load"), Connections: 2})
	defer l.Stop()
	if !envoykit.Eventually(10*time.Second, func() bool { return len(accessLogPaths(t, accessLog)) >= 20 }) {
		t.Fatalf("the access log has %d lines", len(accessLogPaths(t, accessLog)))
	}

	// 1. logrotate's rename, then `envoy-agent reopen-logs`.
	if err := os.Rename(accessLog, accessLog+".1"); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runAgent(t, "reopen-logs", "--config", p.config)
	if code != 0 || !strings.Contains(stdout, "reopened: 1 epochs") {
		t.Fatalf("reopen-logs: exit %d, %q %q", code, stdout, stderr)
	}
	if !envoykit.Eventually(10*time.Second, func() bool { return len(accessLogPaths(t, accessLog)) >= 20 }) {
		t.Fatalf("after reopen-logs, the new access log has %d lines", len(accessLogPaths(t, accessLog)))
	}

	// 2. A reload leaves the old epoch draining (20s) while the new one serves; rotate again and
	// send SIGUSR1: both epochs must let go of the renamed file.
	if code, out := p.reload(); code != 0 {
		t.Fatalf("reload: exit %d: %s", code, out)
	}
	if err := os.Rename(accessLog, accessLog+".2"); err != nil {
		t.Fatal(err)
	}
	before := strings.Count(p.stderr.String(), "envoy reopened its log files")
	p.signal(syscall.SIGUSR1)
	if !envoykit.Eventually(10*time.Second, func() bool {
		return strings.Count(p.stderr.String(), "envoy reopened its log files") > before
	}) {
		t.Fatal("no \"envoy reopened its log files\" after SIGUSR1")
	}
	if !p.logged("envoy reopened its log files\" epochs=2") {
		t.Errorf("SIGUSR1 with a draining epoch did not reach two epochs")
	}
	if !envoykit.Eventually(10*time.Second, func() bool {
		files := envoyLogFiles(t, p.proc.Pid(), accessLog)
		for _, fs := range files {
			for _, f := range fs {
				if f != accessLog {
					return false
				}
			}
		}
		return len(files) == 2
	}) {
		t.Errorf("after SIGUSR1, Envoy's open log files: %v (want both epochs on %s only)", envoyLogFiles(t, p.proc.Pid(), accessLog), accessLog)
	}
	if !envoykit.Eventually(10*time.Second, func() bool { return len(accessLogPaths(t, accessLog)) >= 20 }) {
		t.Fatalf("after SIGUSR1, the new access log has %d lines", len(accessLogPaths(t, accessLog)))
	}

	l.Stop()
	ok := l.OK()
	if l.Failed() > 0 {
		t.Errorf("%d requests failed (%s)", l.Failed(), l.LastErr())
	}
	// Envoy writes its buffer out every --file-flush-interval-msec (1s).
	var counts [3]int
	logged := func() int {
		counts = [3]int{len(accessLogPaths(t, accessLog+".1")), len(accessLogPaths(t, accessLog+".2")), len(accessLogPaths(t, accessLog))}
		return counts[0] + counts[1] + counts[2]
	}
	if !envoykit.Eventually(10*time.Second, func() bool { return int64(logged()) >= ok }) || int64(logged()) != ok {
		t.Fatalf("%d requests answered, %d logged (access.log.1 %d, .2 %d, access.log %d)", ok, logged(), counts[0], counts[1], counts[2])
	}
	t.Logf("%d requests, logged: access.log.1 %d, access.log.2 %d, access.log %d", ok, counts[0], counts[1], counts[2])
	for _, l := range strings.Split(p.stderr.String(), "\n") {
		if priorityRE.MatchString(l) {
			t.Errorf("a line has a journal priority though stderr is not the journal: %q", l)
		}
	}
}

// TestStderrReaderGone: the reader of the agent's stderr goes away (as when
// journald restarts); the agent and Envoy live on, log writes fail quietly,
// a reload works and a stop drains and exits 0. The agent catches SIGPIPE
// rather than ignoring it, so Envoy starts with SIGPIPE's default
// disposition, as it would unsupervised.
func TestStderrReaderGone(t *testing.T) {
	t.Parallel()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	copied := make(chan struct{})
	var early envoykit.SyncBuffer
	go func() { _, _ = io.Copy(&early, r); close(copied) }()
	p := startAgent(t, procOptions{stderrFile: w})
	w.Close()
	if sigMask(t, p.proc.Pid(), "SigCgt")&(1<<(syscall.SIGPIPE-1)) == 0 {
		t.Errorf("the agent does not catch SIGPIPE")
	}
	// Not ignored: an ignored signal stays ignored through exec. (Envoy 1.40
	// ignores SIGPIPE itself: a bare Envoy's SigIgn has it; that is its own
	// choice to make.)
	if sigMask(t, p.proc.Pid(), "SigIgn")&(1<<(syscall.SIGPIPE-1)) != 0 {
		t.Errorf("the agent ignores SIGPIPE, which its children inherit")
	}
	r.Close() // the journal goes away
	<-copied

	// A reload makes the agent and Envoy write to the broken pipe.
	if code, out := p.reload(); code != 0 || !strings.Contains(out, "reloaded: epoch 1") {
		t.Fatalf("reload with no stderr reader: exit %d: %s", code, out)
	}
	for range 20 {
		if r, err := envoykit.Get(envoykit.URL(p.ports.Listener, "/"), 5*time.Second); err != nil || r.Code != 200 {
			t.Fatalf("traffic with no stderr reader: %+v, %v", r, err)
		}
	}
	if code := p.healthz(); code != 200 {
		t.Fatalf("/healthz/ready = %d with no stderr reader", code)
	}
	sent := p.signal(syscall.SIGTERM)
	if code, _ := p.wait(sent, 20*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM with no stderr reader, want 0 (a drained stop); its log before the pipe broke:\n%s", code, early.String())
	}
}

// sigMask reads one signal mask (SigCgt, SigIgn) of pid.
func sigMask(t *testing.T, pid int, field string) uint64 {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// TestStderrReaderGoneExitStatus: with no reader of its stderr, an agent
// whose Envoy is killed still exits 1 (for Restart=on-failure), not by
// SIGPIPE while it prints the reason.
func TestStderrReaderGoneExitStatus(t *testing.T) {
	t.Parallel()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, r) }()
	p := startAgent(t, procOptions{stderrFile: w})
	w.Close()
	r.Close()
	if err := syscall.Kill(p.envoyPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code, _ := p.wait(time.Now(), 20*time.Second); code != 1 {
		t.Fatalf("exit %d (-1 is death by a signal: %v), want 1", code, p.proc.State())
	}
}
