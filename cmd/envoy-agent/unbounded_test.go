//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// TestFIFOInPlaceOfAFileNeverHangs: a FIFO as --config or as config_path
// used to hang validate, run and reload (and a reload stuck on it made
// SIGTERM wait forever). With the real Envoy: each is refused at once, the
// serving Envoy keeps serving, and a stop still drains and exits 0.
func TestFIFOInPlaceOfAFileNeverHangs(t *testing.T) {
	p := startAgent(t, procOptions{})
	fifo := filepath.Join(p.dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"validate", "run"} {
		code, _, stderr := runAgent(t, cmd, "--config", fifo)
		if code != 3 || !strings.Contains(stderr, "is not a regular file (a FIFO)") {
			t.Fatalf("%s --config FIFO: exit %d, want 3 naming the FIFO:\n%s", cmd, code, stderr)
		}
	}
	bootstrap := filepath.Join(p.dir, "envoy.yaml")
	if err := os.Rename(bootstrap, bootstrap+".good"); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(bootstrap, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := p.reload()
	if code != 3 || !strings.Contains(out, "envoy.config_path") || !strings.Contains(out, "not a regular file") {
		t.Fatalf("reload with a FIFO bootstrap: exit %d, want 3 naming envoy.config_path: %s", code, out)
	}
	if code, _, stderr := runAgent(t, "validate", "--config", p.config); code != 3 || !strings.Contains(stderr, "not a regular file") {
		t.Fatalf("validate with a FIFO bootstrap: exit %d: %s", code, stderr)
	}
	if err := os.Rename(p.config, p.config+".good"); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(p.config, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := p.reload(); code == 0 {
		t.Fatalf("reload with a FIFO configuration: exit 0: %s", out)
	}
	if p.healthz() != 200 {
		t.Fatal("the serving Envoy is not ready after the refused reloads")
	}
	if code, took := p.wait(p.signal(syscall.SIGTERM), 60*time.Second); code != 0 {
		t.Fatalf("stop after the refused reloads: exit %d after %s", code, took)
	}
}

// TestStopWaitsOnAHungReloadAtMostStartTimeout: a reload that hangs holds a
// stop for start_timeout at most. The hang comes from a stand-in for the
// Envoy binary that never answers --version (a real Envoy answers at once;
// a wedged binary or file system is what this stands for).
func TestStopWaitsOnAHungReloadAtMostStartTimeout(t *testing.T) {
	p := startAgent(t, procOptions{agent: map[string]string{"start_timeout": `"3s"`, "termination_drain_duration": `"2s"`}})
	hung := filepath.Join(p.dir, "hung-envoy")
	pidFile := filepath.Join(p.dir, "hung.pid")
	writeFile(t, hung, "#!/bin/sh\necho $$ > "+pidFile+"\nexec sleep 120\n")
	if err := os.Chmod(hung, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	config := readFileT(t, p.config)
	writeFile(t, p.config, strings.Replace(config, "binary_path = ", "binary_path = "+strconv.Quote(hung)+"\n# was: binary_path = ", 1))
	p.signal(syscall.SIGHUP)
	if !envoykit.Eventually(30*time.Second, func() bool { _, err := os.Stat(pidFile); return err == nil }) {
		t.Fatal("the reload never ran the stand-in binary")
	}
	sent := p.signal(syscall.SIGTERM)
	code, took := p.wait(sent, 25*time.Second)
	if code != 0 || !strings.Contains(p.stderr.String(), "the reload under way did not end within start_timeout (3s); stopping anyway") {
		t.Fatalf("stop during a hung reload: exit %d after %s; want 0 after start_timeout and the drain:\n%s", code, took, p.stderr)
	}
	// start_timeout 3s, then a drain of at most 2s and Envoy's quit; the
	// hung --version alone would have held it 30s.
	if took > 20*time.Second {
		t.Fatalf("the stop took %s", took)
	}
	assertNoEnvoyFor(t, p.dir)
}

// runLimited runs the agent binary with args under an RLIMIT_DATA of limit
// bytes (prlimit) and returns its exit code, stderr, peak RSS and CPU time.
// The peak RSS is only indicative: Go starts a child in the parent's memory
// (vfork), and the kernel counts the parent's peak in the child's when it
// executes the binary; the limit is what bounds the child.
func runLimited(t *testing.T, limit uint64, args ...string) (int, string, int64, time.Duration) {
	t.Helper()
	cmd := exec.Command("prlimit", append([]string{"--data=" + strconv.FormatUint(limit, 10), "--", agentBin(t)}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(60*time.Second, func() { _ = cmd.Process.Kill() })
	_ = cmd.Wait()
	timer.Stop()
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	return cmd.ProcessState.ExitCode(), stderr.String(), ru.Maxrss << 10, time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// validateDataLimit is the data segment validate gets: Go's runtime takes
// about 100 MiB of it at start (address space for its heap's arena map,
// hardly touched), so this leaves the parse about 64 MiB.
const validateDataLimit = 160 << 20

// vmHWM is a process's peak resident set, from /proc/PID/status.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// TestHostileFilesAreReadInBoundedMemory: a TOML key of 8,000 dotted parts
// (16 KB) took validate to 838 MB, a 100,000-part table header 46.8 s of
// CPU and 10 GB, and a reload of a 16 KB key grew the running agent from
// 17.7 to 827 MB; yaml.v3 spent up to 190 bytes a byte of a bootstrap. Now
// validate refuses each (exit 3, naming file, line and key) under
// validateDataLimit (past it an allocation kills the agent: exit 2) and within a
// second of CPU (checked against 5 s), and a reload refusing them leaves the
// running agent's peak RSS within 64 MiB of what it was; the reload client
// runs under a 1 GiB data limit, the agent under 256 MiB more than it
// holds.
func TestHostileFilesAreReadInBoundedMemory(t *testing.T) {
	p := startAgent(t, procOptions{})
	dir := t.TempDir()
	dotted := func(n int) string { return strings.Repeat("d.", n-1) + "d" }
	good, err := os.ReadFile(p.config)
	if err != nil {
		t.Fatal(err)
	}
	toml := map[string]string{
		"dotted8000.toml": dotted(8000) + " = 1\n",
		"header.toml":     "[" + dotted(100000) + "]\n",
		"d200k.toml":      dotted(100000) + "=1\n",
	}
	for name, text := range toml {
		path := filepath.Join(dir, name)
		writeFile(t, path, text)
		code, stderr, rss, cpu := runLimited(t, validateDataLimit, "validate", "--config", path)
		if code != 3 || !strings.Contains(stderr, path+":1: d.d.d.") || !strings.Contains(stderr, "dotted parts") {
			t.Fatalf("validate %s: exit %d, want 3 naming the file, line and key:\n%.2000s", name, code, stderr)
		}
		if cpu > 5*time.Second {
			t.Fatalf("validate %s: CPU %s", name, cpu)
		}
		t.Logf("validate %s: exit %d, peak RSS %d MiB, CPU %s", name, code, rss>>20, cpu.Round(time.Millisecond))
	}
	// Bootstraps yaml.v3 would spend hundreds of MB or seconds on.
	big := make([]string, 20000)
	for i := range big {
		big[i] = fmt.Sprintf("k%d: v", i)
	}
	yamls := map[string]string{
		"keys.yaml":    "a: {" + strings.Repeat("?,", 1<<20) + "}\n",
		"aliases.yaml": "big: &b {" + strings.Join(big, ",") + "}\nr: [" + strings.TrimSuffix(strings.Repeat("*b,", 100), ",") + "]\n",
	}
	for name, text := range yamls {
		path := filepath.Join(dir, name)
		writeFile(t, path, text)
		cfg := filepath.Join(dir, name+".toml")
		writeFile(t, cfg, strings.Replace(string(good), "config_path = ", "config_path = \""+path+"\"\n# was: config_path = ", 1))
		code, stderr, rss, cpu := runLimited(t, validateDataLimit, "validate", "--config", cfg)
		if code != 3 || !strings.Contains(stderr, "envoy.config_path") || !strings.Contains(stderr, path) {
			t.Fatalf("validate with %s: exit %d, want 3 naming envoy.config_path and the file:\n%.2000s", name, code, stderr)
		}
		if cpu > 5*time.Second {
			t.Fatalf("validate with %s: CPU %s", name, cpu)
		}
		t.Logf("validate with %s: exit %d, peak RSS %d MiB, CPU %s", name, code, rss>>20, cpu.Round(time.Millisecond))
	}
	// The running agent, under a data limit of 256 MiB more than it holds.
	pid := p.proc.Pid()
	var lim unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_DATA, nil, &lim); err != nil {
		t.Fatal(err)
	}
	lim.Cur = uint64(vmData(t, pid)) + 256<<20
	if err := unix.Prlimit(pid, unix.RLIMIT_DATA, &lim, nil); err != nil {
		t.Fatal(err)
	}
	before := vmHWM(t, pid)
	writeFile(t, p.config, string(good)+dotted(8000)+" = 1\n")
	code, stderr, _, _ := runLimited(t, 1<<30, "reload", "--config", p.config)
	if code != 3 || !strings.Contains(stderr, "dotted parts") {
		t.Fatalf("reload of an 8,000-part key: exit %d, want 3:\n%.2000s", code, stderr)
	}
	yamlPath := filepath.Join(dir, "keys.yaml")
	writeFile(t, p.config, strings.Replace(string(good), "config_path = ", "config_path = \""+yamlPath+"\"\n# was: config_path = ", 1))
	code, stderr, _, _ = runLimited(t, 1<<30, "reload", "--config", p.config)
	if code != 3 || !strings.Contains(stderr, yamlPath) {
		t.Fatalf("reload of a hostile bootstrap: exit %d, want 3:\n%.2000s", code, stderr)
	}
	after := vmHWM(t, pid)
	if after-before > 64<<20 {
		t.Fatalf("the refused reloads grew the agent's peak RSS from %d to %d MiB", before>>20, after>>20)
	}
	if p.healthz() != 200 {
		t.Fatal("the serving Envoy is not ready after the refused reloads")
	}
	t.Logf("the running agent's peak RSS: %d MiB before the refused reloads, %d MiB after", before>>20, after>>20)
}

// vmData is a process's data segment (what RLIMIT_DATA bounds), from
// /proc/PID/status.
func vmData(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmData:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmData")
	return 0
}
