//go:build linux

package envoy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy/adminapi"
	"github.com/envoy-agent/envoy-agent/envoy/conncount"
	"github.com/envoy-agent/envoy-agent/envoy/epochfiles"
	"github.com/envoy-agent/envoy-agent/envoy/inplace"
	"github.com/envoy-agent/envoy-agent/internal/hostfiles"
)

// Proxy is one Envoy that an Agent supervises, as in Istio's pkg/envoy.
type Proxy interface {
	// Run starts Envoy and blocks until it exits. A value on the channel
	// stops Envoy (POST /quitquitquit, then SIGKILL after a grace period)
	// and Run returns that value.
	Run(<-chan error) error
	// Drain fails Envoy's health checks and starts a graceful drain of its
	// listeners; skipExit keeps the listeners open with no end.
	Drain(skipExit bool) error
	// Cleanup removes what Run left behind.
	Cleanup()
	// UpdateConfig replaces the bootstrap file; it restarts nothing.
	UpdateConfig([]byte) error
}

// Envoy is the Proxy that runs a real Envoy binary.
type Envoy struct {
	cfg   ProxyConfig
	log   Logger
	admin *adminapi.Client

	runDirOnce sync.Once
	runDir     string
	runDirErr  error
	ownRunDir  bool
	// hotRestartSocket is Envoy's --socket-path (hostfiles.HotRestartSocketPrefix); ""
	// only for epochs adopted from an agent that ran Envoy with the
	// abstract sockets, whose successors must find them there.
	hotRestartSocket string

	mu       sync.Mutex
	cur      *process               // the serving epoch
	procs    map[*process]struct{}  // every epoch not yet reaped
	closed   bool                   // Run is stopping Envoy: no new epochs
	switched chan struct{}          // a hot restart changed cur
	replaced map[*process]time.Time // epochs a hot restart replaced: when Envoy ends them at the latest

	restartMu sync.Mutex  // serializes hot restarts
	replacing atomic.Bool // a new process is being started in place of the serving one: a hot restart, or a drain and restart

	copies epochfiles.Copier // the bootstrap copies every epoch runs from

	conns *conncount.Counter // counts the downstream connections (package conncount)
}

// NewProxy returns the Proxy for cfg. Its dynamic type is *Envoy.
func NewProxy(cfg ProxyConfig) Proxy { return NewEnvoy(cfg) }

// NewEnvoy returns an Envoy for cfg.
func NewEnvoy(cfg ProxyConfig) *Envoy {
	e := &Envoy{
		cfg:      cfg,
		log:      loggerOrNop(cfg.Logger),
		admin:    cfg.newAdmin(),
		procs:    map[*process]struct{}{},
		switched: make(chan struct{}, 1),
	}
	e.conns = conncount.New(e.log.Warnf)
	return e
}

// Admin returns the client for this Envoy's admin API.
func (e *Envoy) Admin() *adminapi.Client { return e.admin }

// Pid is the serving Envoy's process id, 0 before it started.
func (e *Envoy) Pid() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cur == nil {
		return 0
	}
	return e.cur.pid
}

// Epoch is the serving Envoy's hot-restart epoch.
func (e *Envoy) Epoch() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cur == nil {
		return 0
	}
	return e.cur.epoch
}

// Args returns the command line (without the binary) that epoch would run with.
func (e *Envoy) Args(epoch int) []string {
	return e.config().args(epoch, e.adminAddressPath(epoch), e.hotRestartSocket)
}

func (e *Envoy) ensureRunDir() (string, error) {
	e.runDirOnce.Do(func() {
		if dir := e.config().RunDir; dir != "" {
			e.runDir = dir
			if e.runDirErr = os.MkdirAll(e.runDir, 0o750); e.runDirErr == nil {
				e.runDirErr = hostfiles.CheckRunDir(e.runDir)
			}
		} else {
			e.runDir, e.runDirErr = os.MkdirTemp("", "envoy-agent-")
			e.ownRunDir = e.runDirErr == nil
		}
		// Set even while hot restart is off: a drain-and-restart may switch
		// to an Envoy that has it (args passes it only then).
		if e.runDirErr == nil {
			e.runDirErr = hostfiles.CheckHotRestartSocketPath(e.runDir, e.config().BaseID)
			e.hotRestartSocket = hostfiles.HotRestartSocketPrefix(e.runDir)
		}
	})
	if e.runDirErr != nil {
		return "", fmt.Errorf("envoy run folder: %w", e.runDirErr)
	}
	return e.runDir, nil
}

// Run starts epoch 0 and blocks until the serving Envoy exits by itself, or
// abort says to stop it. Epochs that a hot restart replaced exit on their
// own (Envoy tells them to) and are reaped without ending Run.
func (e *Envoy) Run(abort <-chan error) error {
	if _, err := e.ensureRunDir(); err != nil {
		return err
	}
	var addrErr chan error
	if e.serving() == nil { // else an epoch adopted from a previous agent (AdoptEnvoy)
		cfg := e.config()
		if err := hostfiles.ClearLeftovers(hostfiles.Leftovers{RunDir: e.runDir, Temporary: e.ownRunDir, HotRestartSocket: e.hotRestartSocket,
			BaseID: cfg.BaseID, SharedMemory: !cfg.DisableHotRestart}, e.log); err != nil {
			return err
		}
		p, err := e.startEpoch(cfg, cfg.ConfigPath, 0)
		if err != nil {
			return err
		}
		e.setServing(p)
		addrErr = make(chan error, 1)
		go func() { addrErr <- e.checkAdminAddress(p) }()
	}

	for {
		p := e.serving()
		select {
		case err := <-abort:
			e.stopAll()
			return err
		case err := <-addrErr:
			if err != nil {
				e.stopAll()
				return err
			}
			addrErr = nil
		case <-e.switched:
		case <-p.done:
			// A hot restart under way may be about to make its new
			// epoch the serving one: let it end first.
			for e.replacing.Load() && e.serving() == p {
				time.Sleep(switchSettle)
			}
			if p == e.serving() {
				e.stopAll()
				return p.exitError()
			}
		}
	}
}

func (e *Envoy) config() ProxyConfig {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cfg
}

func (e *Envoy) serving() *process {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cur
}

func (e *Envoy) setServing(p *process) {
	e.mu.Lock()
	if e.cur != nil && e.cur != p {
		e.cur.replaced = time.Now()
	}
	e.cur = p
	e.mu.Unlock()
	e.admin.Reconnect()
	select {
	case e.switched <- struct{}{}:
	default:
	}
}

// copyBootstrap copies the bootstrap at source for epoch of cfg
// (epochfiles.Copier.Copy), in the run folder.
func (e *Envoy) copyBootstrap(cfg ProxyConfig, source string, epoch int) (*epochfiles.Copy, error) {
	return e.copies.Copy(e.runDir, source, cfg.ConfigPath, epoch, cfg.rewrite())
}

// startEpoch starts Envoy with cfg as the given epoch and tracks it until
// it is reaped. Envoy runs a private copy of the bootstrap at source, so that
// the file can be edited (or be broken) while it runs, and a failed reload
// can restart exactly the configuration that is serving.
func (e *Envoy) startEpoch(cfg ProxyConfig, source string, epoch int) (*process, error) {
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return nil, errors.New("envoy is being stopped")
	}
	copied, err := e.copyBootstrap(cfg, source, epoch)
	if err != nil {
		return nil, err
	}
	return e.startEpochFrom(cfg, copied, epoch)
}

// startEpochFrom starts epoch from copied, a private copy of the bootstrap
// that the epoch then owns (it is removed when the epoch ends, or now if
// it cannot start), with its resource files when cfg asks for them.
func (e *Envoy) startEpochFrom(cfg ProxyConfig, copied *epochfiles.Copy, epoch int) (*process, error) {
	path := e.adminAddressPath(epoch)
	if err := createAdminAddressFile(path); err != nil {
		_ = os.Remove(copied.Path)
		return nil, err
	}
	files, run, why := epochfiles.ForEpoch(copied, cfg.ConfigPath, cfg.ResourceFiles, cfg.XDS)
	if why != nil {
		e.log.Warnf("envoy epoch %d runs %s as it is (a reload will hot restart it): %v", epoch, cfg.ConfigPath, why)
	}
	e.sayNames(e.NamedListeners(), files.Named())
	e.sayInline(e.inline(), files.Inline())
	runCfg := cfg
	runCfg.ConfigPath = run
	args := runCfg.args(epoch, path, e.hotRestartSocket)
	if files.Resources != "" {
		args = strictResources(args)
	}
	stdout, stderr := cfg.outputs()
	binary, _ := os.Stat(cfg.BinaryPath)
	p, err := startProcess(cfg.BinaryPath, args, cfg.Env, epoch, path, stdout, stderr)
	if err != nil {
		files.Remove()
		return nil, err
	}
	p.files, p.binary = files, binary
	e.log.Infof("started envoy epoch %d, pid %d: %s %s", epoch, p.pid, cfg.BinaryPath, strings.Join(args, " "))
	e.track(p)
	return p, nil
}

// sayNames logs the names given to listeners the operator left unnamed
// (inplace.Bootstrap.Named), once: when they differ from before's.
func (e *Envoy) sayNames(before, now []inplace.NamedListener) {
	if len(now) == 0 || slices.Equal(before, now) {
		return
	}
	var list []string
	for _, n := range now {
		list = append(list, n.String())
	}
	e.log.Infof("listeners without a name run under these names in the files the agent writes for Envoy (Envoy's statistics name a listener by its address, and keep theirs): %s", strings.Join(list, ", "))
}

// sayInline logs the route configurations and secrets that stay in the
// bootstrap because they could not be converted for ADS, and why, once:
// when they differ from before's.
func (e *Envoy) sayInline(before, now []string) {
	if len(now) == 0 || slices.Equal(before, now) {
		return
	}
	e.log.Warnf("these stay in the bootstrap, so a change of them is a change of their listener (or a hot restart): %s", strings.Join(now, "; "))
}

// inline is what the serving epoch keeps in its bootstrap that could not
// be converted for ADS.
func (e *Envoy) inline() []string {
	if p := e.serving(); p != nil && p.files != nil {
		return p.files.Inline()
	}
	return nil
}

// NamedListeners are the names the agent gave the serving epoch's
// listeners that the operator left unnamed; none when it runs its
// bootstrap as it is.
func (e *Envoy) NamedListeners() []inplace.NamedListener {
	if p := e.serving(); p != nil && p.files != nil {
		return p.files.Named()
	}
	return nil
}

// ResourcesAccepted checks, for a serving epoch that runs from resource
// files, that Envoy took every listener and cluster in them (it reports
// LIVE without one it rejected); nil for an epoch that runs its bootstrap
// as it is.
func (e *Envoy) ResourcesAccepted(ctx context.Context) error {
	p := e.serving()
	if p == nil {
		return nil
	}
	return e.resourcesAccepted(ctx, p)
}

func (e *Envoy) resourcesAccepted(ctx context.Context, p *process) error {
	return p.files.Accepted(ctx, adminBodies{e.admin})
}

// track adds an epoch, started or adopted, to those the Envoy supervises
// until it is reaped; then its bootstrap copy is removed and it is
// forgotten.
func (e *Envoy) track(p *process) {
	e.mu.Lock()
	e.procs[p] = struct{}{}
	e.mu.Unlock()
	go func() {
		<-p.done
		p.files.Remove()
		e.mu.Lock()
		delete(e.procs, p)
		e.mu.Unlock()
	}()
}

// stopAll stops every epoch: the serving one through its admin API (Envoy
// then also ends its hot-restart parent), and whatever is left by signal.
func (e *Envoy) stopAll() {
	e.mu.Lock()
	e.closed = true
	cur := e.cur
	var others []*process
	for p := range e.procs {
		if p != cur {
			others = append(others, p)
		}
	}
	e.mu.Unlock()
	if cur != nil {
		e.stop(cur)
	}
	for _, p := range others {
		e.stopReplaced(p)
	}
}

// stopReplaced ends an epoch that is not the serving one: Envoy ends it
// when the serving one quits; SIGTERM if it has not, SIGKILL after the
// grace period.
func (e *Envoy) stopReplaced(p *process) {
	if !p.waitFor(replacedEpochQuitWait) {
		p.signalGroup(syscall.SIGTERM)
		if !p.waitFor(e.quitGrace()) {
			p.signalGroup(syscall.SIGKILL)
			<-p.done
		}
	}
}

func (e *Envoy) quitGrace() time.Duration {
	if g := e.config().QuitGrace; g > 0 {
		return g
	}
	return DefaultQuitGrace
}

// stop ends p: POST /quitquitquit (Envoy flushes its logs and stats), SIGTERM
// when the admin API does not take it, SIGKILL after the grace period.
func (e *Envoy) stop(p *process) {
	if p.exited() {
		return
	}
	grace := e.quitGrace()
	ctx, cancel := context.WithTimeout(context.Background(), min(adminCallTimeout, grace))
	err := e.admin.Quit(ctx)
	cancel()
	if err != nil {
		e.log.Warnf("envoy pid %d: %v; sending SIGTERM", p.pid, err)
		p.signalGroup(syscall.SIGTERM)
	}
	if p.waitFor(grace) {
		return
	}
	e.log.Warnf("envoy pid %d still running %s after it was told to quit; sending SIGKILL", p.pid, grace)
	p.signalGroup(syscall.SIGKILL)
	<-p.done
}

// Drain fails health checks, then starts a graceful drain of the listeners
// (inbound only for a sidecar).
func (e *Envoy) Drain(skipExit bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), adminapi.DefaultTimeout)
	defer cancel()
	return errors.Join(
		e.admin.HealthcheckFail(ctx),
		e.admin.DrainListeners(ctx, e.config().Sidecar, true, skipExit),
	)
}

// Cleanup removes the bootstrap when ConfigCleanup is set and the run folder
// the proxy made for itself.
func (e *Envoy) Cleanup() {
	e.mu.Lock()
	alive := 0
	for p := range e.procs {
		if !p.exited() {
			alive++
		}
	}
	e.mu.Unlock()
	cfg := e.config()
	if !cfg.DisableHotRestart && alive == 0 && e.serving() != nil {
		if err := hostfiles.RemoveSharedMemory(cfg.BaseID); err != nil {
			e.log.Warnf("remove envoy's shared memory: %v", err)
		}
	}
	if cfg.AdminSocket != "" && alive == 0 && e.serving() != nil {
		// Envoy leaves its admin socket behind.
		_ = os.Remove(cfg.AdminSocket)
	}
	if cfg.ConfigCleanup && cfg.ConfigPath != "" {
		if err := os.Remove(cfg.ConfigPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			e.log.Warnf("remove envoy config: %v", err)
		}
	}
	if e.ownRunDir {
		_ = os.RemoveAll(e.runDir)
	} else if e.runDir != "" {
		hostfiles.RemoveRunFiles(e.runDir)
	}
}

// UpdateConfig atomically replaces the bootstrap file with cfg, keeping the
// old file's mode. Envoy reads its bootstrap only at start, so the new
// content takes effect at the next start or hot restart.
func (e *Envoy) UpdateConfig(cfg []byte) error {
	target := e.config().ConfigPath
	mode := os.FileMode(0o640)
	if fi, err := os.Stat(target); err == nil {
		mode = fi.Mode().Perm()
	}
	dir := filepath.Dir(target)
	f, err := os.CreateTemp(dir, ".envoy-config-*")
	if err != nil {
		return fmt.Errorf("update envoy config: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(cfg); err != nil {
		f.Close()
		return fmt.Errorf("update envoy config: %w", err)
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return fmt.Errorf("update envoy config: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("update envoy config: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("update envoy config: %w", err)
	}
	if err := os.Rename(f.Name(), target); err != nil {
		return fmt.Errorf("update envoy config: %w", err)
	}
	return nil
}

// LastLines returns the last lines the serving Envoy wrote to stderr.
func (e *Envoy) LastLines() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cur == nil {
		return nil
	}
	return e.cur.relay.LastLines()
}
