package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// bench is what every scenario shares: the binaries, a work folder, the
// process starter and the upstream.
type bench struct {
	o        options
	agentBin string // absolute
	envoyBin string // absolute
	work     string // temporary: bootstraps, configs, run folders
	logDir   string // child logs, kept in the output folder
	sp       *spawner
	up       *upstream
	progress io.Writer
	t0       time.Time
	seq      atomic.Int32
}

// logf reports progress on stderr (stdout is for the table).
func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.progress, "[%6.1fs] %s\n", time.Since(b.t0).Seconds(), fmt.Sprintf(format, args...))
}

// dir makes a fresh folder in the work folder.
func (b *bench) dir(name string) (string, error) {
	d := filepath.Join(b.work, fmt.Sprintf("%02d-%s", b.seq.Add(1), name))
	if err := os.MkdirAll(d, 0o755); err != nil {
		return "", fmt.Errorf("work folder: %w", err)
	}
	return d, nil
}

func (b *bench) logPath(name string) string {
	return filepath.Join(b.logDir, name+".log")
}

// childEnv is the bench's environment without anything systemd-related,
// plus extra (NOTIFY_SOCKET=..., WATCHDOG_USEC=...).
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID":
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// envoyArgs is a bare Envoy's command line, as a plain unit would run it,
// with the same worker count and log level as the agent's Envoy and a base
// id of its own (hot restart is on by default in Envoy, and other Envoys on
// this host may use base id 0).
func envoyArgs(bootstrapPath string, baseID uint32) []string {
	return []string{"-c", bootstrapPath, "--concurrency", "1", "-l", "warning",
		"--base-id", strconv.FormatUint(uint64(baseID), 10)}
}

func (b *bench) startEnvoy(name, bootstrapPath string) (*proc, error) {
	return b.sp.start(name, b.logPath(name), childEnv(), b.envoyBin, envoyArgs(bootstrapPath, newBaseID())...)
}

func (b *bench) startAgent(name, configPath string, env ...string) (*proc, error) {
	return b.sp.start(name, b.logPath(name), childEnv(env...), b.agentBin, "run", "--config", configPath)
}

// agentHas reports whether the agent's usage lists the command.
func (b *bench) agentHas(ctx context.Context, command string) bool {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, b.agentBin, "help").CombinedOutput()
	return strings.Contains(string(out), "envoy-agent "+command+" ") || strings.Contains(string(out), "envoy-agent "+command+"\n")
}

// version runs bin with args and returns the first line that matches.
func version(ctx context.Context, bin string, args ...string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return "unknown"
	}
	s := strings.TrimSpace(string(out))
	if i := strings.Index(s, "version: "); i >= 0 {
		s = s[i+len("version: "):]
	}
	first, _, _ := strings.Cut(s, "\n")
	return first
}
