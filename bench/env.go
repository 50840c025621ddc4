package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// bench is what every scenario shares: the binaries, a work folder, the
// process starter and the upstream.
type bench struct {
	o        options
	agentBin string // absolute
	envoyBin string // absolute
	work     string // temporary: bootstraps, configs, run folders
	logDir   string // child logs, kept in the output folder
	sp       *procs
	up       *envoykit.Upstream
	progress io.Writer
	t0       time.Time
	seq      atomic.Int32

	baseIDsMu sync.Mutex
	baseIDs   []uint32 // every base id handed out, for the shared-memory clean-up
}

// baseID hands out a hot-restart base id and remembers it.
func (b *bench) baseID() uint32 {
	id := envoykit.BaseID()
	b.baseIDsMu.Lock()
	b.baseIDs = append(b.baseIDs, id)
	b.baseIDsMu.Unlock()
	return id
}

// removeSharedMemory removes what the Envoys of the run left in /dev/shm;
// call it once every process is gone (a killed agent's Envoy, and a bare
// Envoy, leave their hot-restart region behind).
func (b *bench) removeSharedMemory() {
	b.baseIDsMu.Lock()
	defer b.baseIDsMu.Unlock()
	for _, id := range b.baseIDs {
		envoykit.RemoveSharedMemory(id)
	}
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

// startEnvoy starts a bare Envoy as a plain unit would run it, with the
// same worker count and log level as the agent's Envoy
// (envoykit.BareArgs).
func (b *bench) startEnvoy(name, bootstrapPath string) (*proc, error) {
	return b.sp.start(name, b.logPath(name), nil, b.envoyBin, envoykit.BareArgs(bootstrapPath, b.baseID())...)
}

// startAgent starts `envoy-agent run` on configPath with env added to a
// clean environment (NOTIFY_SOCKET=..., WATCHDOG_USEC=...).
func (b *bench) startAgent(name, configPath string, env ...string) (*proc, error) {
	return b.sp.start(name, b.logPath(name), env, b.agentBin, "run", "--config", configPath)
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
