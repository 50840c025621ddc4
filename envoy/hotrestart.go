//go:build linux

package envoy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy/cli"
	"github.com/envoy-agent/envoy-agent/envoy/epochfiles"
	"github.com/envoy-agent/envoy-agent/internal/hostfiles"
)

// HotRestartError is a hot restart whose new epoch did not become LIVE. The
// epoch that was serving still serves; Recovery says what was done to keep
// its admin API.
type HotRestartError struct {
	Epoch     int
	Err       error
	LastLines []string // the failed epoch's last log lines
	Recovery  string
}

func (e *HotRestartError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "epoch %d failed: %v", e.Epoch, e.Err)
	if len(e.LastLines) > 0 {
		b.WriteString(" (its last log line: " + strings.TrimSpace(e.LastLines[len(e.LastLines)-1]) + ")")
	}
	if e.Recovery != "" {
		b.WriteString("; " + e.Recovery)
	}
	return b.String()
}

func (e *HotRestartError) Unwrap() error { return e.Err }

// HotRestart starts the next epoch with cfg (same base id and admin port),
// waits until it is LIVE and owns the admin API, and makes it the serving
// epoch; the old one drains for its drain time and is told to exit by the
// new one at the parent shutdown time. It returns the new epoch.
//
// When the new epoch fails, the old one keeps serving traffic, but Envoy
// may have closed its admin listener already (the child takes the admin
// over early in its start) and its shared memory is left marked as
// "initializing", which refuses every later hot restart. HotRestart undoes
// both: it clears the mark and, if the admin API is gone, hot restarts the
// old configuration into the same epoch number, which takes the listening
// sockets and the admin port over with no dropped connection.
//
// Envoy keeps two generations: the new epoch ends at once any epoch older
// than the one it replaces. Call WaitForDrainingEpochs first so that this
// cuts no request.
func (e *Envoy) HotRestart(ctx context.Context, cfg ProxyConfig) (int, error) {
	return e.hotRestart(ctx, cfg, "")
}

// hotRestart is HotRestart; with copied, it runs that copy (one that
// CopyBootstrap made; cfg.ConfigPath stays the operator's file), which is
// the new epoch's from then on: it is removed when the epoch ends, or at
// once on a failure.
func (e *Envoy) hotRestart(ctx context.Context, cfg ProxyConfig, copied string) (int, error) {
	defer func() {
		if copied != "" { // refused before an epoch took it
			_ = os.Remove(copied)
		}
	}()
	e.restartMu.Lock()
	defer e.restartMu.Unlock()
	e.replacing.Store(true)
	defer e.replacing.Store(false)
	cur := e.config()
	if cur.DisableHotRestart || cfg.DisableHotRestart {
		return 0, errors.New("hot restart is disabled")
	}
	if err := sameIdentity(cur, cfg); err != nil {
		return 0, err
	}
	old := e.serving()
	if old == nil || old.exited() {
		return 0, errors.New("no serving envoy to hot restart")
	}
	if _, err := os.Stat(hostfiles.SharedMemoryPath(cur.BaseID)); err != nil {
		// Epochs above 0 attach to the region epoch 0 made; without it the
		// new epoch would crash. RemoveIPC= or a /dev/shm cleanup does this.
		return 0, fmt.Errorf("envoy's hot-restart shared memory is gone (%w): no new epoch can start; restart the service to apply the change", err)
	}
	next := old.epoch + 1
	e.admin.Reconnect()
	var p *process
	var err error
	if copied != "" {
		p, err = e.startEpochFrom(cfg, &epochfiles.Copy{Path: copied}, next)
		copied = "" // the epoch's now, or removed by startEpochFrom
	} else {
		p, err = e.startEpoch(cfg, cfg.ConfigPath, next)
	}
	if err != nil {
		return 0, err
	}
	if err := e.waitEpochLive(ctx, p, cfg); err != nil {
		lines := p.relay.LastLines()
		e.abandon(p)
		return 0, &HotRestartError{Epoch: next, Err: err, LastLines: lines, Recovery: e.recover(ctx, old, next)}
	}
	e.mu.Lock()
	e.cfg = cfg
	e.mu.Unlock()
	e.setServing(p)
	e.markReplaced(old, cfg)
	e.log.Infof("envoy epoch %d (pid %d) is LIVE; epoch %d (pid %d) drains and exits", next, p.pid, old.epoch, old.pid)
	return next, nil
}

// drainingEpochPoll is how often a reload that waits for a draining epoch
// re-counts its connections: often enough that the wait ends within a
// tenth of a second of the last connection closing, cheap (one read of
// /proc per poll).
const drainingEpochPoll = 100 * time.Millisecond

// DrainingEpoch is an epoch that a hot restart replaced and that still
// holds downstream connections, or still accepts new ones.
type DrainingEpoch struct {
	Epoch, Pid  int
	Connections int           // -1 when they cannot be counted
	Listening   bool          // it has not closed its listening sockets yet
	Left        time.Duration // until Envoy ends it (its parent_shutdown_duration)
}

// markReplaced records when Envoy will end old, which cfg's epoch replaced:
// at cfg's parent shutdown time.
func (e *Envoy) markReplaced(old *process, cfg ProxyConfig) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.replaced == nil {
		e.replaced = map[*process]time.Time{}
	}
	for p := range e.replaced {
		if p.exited() {
			delete(e.replaced, p)
		}
	}
	e.replaced[old] = time.Now().Add(durationOr(cfg.ParentShutdownDuration, DefaultParentShutdownDuration) + cli.ReplacedExitGrace)
}

// WaitForDrainingEpochs waits until no epoch that a hot restart replaced
// still holds a downstream connection or a listening socket: each has
// stopped accepting and closed every connection, or exited. (A replaced
// epoch stops accepting only when the new one, just past LIVE, tells it to
// drain: counted at zero connections before that, it could still take a
// connection and be ended with its request in flight.)
// Call it before HotRestart: Envoy keeps two generations at most, so
// starting epoch N+2 ends epoch N at once, cutting whatever it still
// serves. The wait for an epoch ends at the latest when Envoy itself ends
// it (its parent_shutdown_duration, plus cli.ReplacedExitGrace), or when ctx
// ends (an error). report, when not nil, is called at every poll that
// waits. It returns how long it waited.
func (e *Envoy) WaitForDrainingEpochs(ctx context.Context, report func(DrainingEpoch)) (time.Duration, error) {
	start := time.Now()
	tick := time.NewTicker(drainingEpochPoll)
	defer tick.Stop()
	for {
		d, waiting := e.drainingEpoch()
		if !waiting {
			return time.Since(start), nil
		}
		if report != nil {
			report(d)
		}
		select {
		case <-ctx.Done():
			return time.Since(start), fmt.Errorf("stopped waiting for epoch %d (pid %d, %d connections) to finish draining: %w", d.Epoch, d.Pid, d.Connections, ctx.Err())
		case <-tick.C:
		}
	}
}

// drainingEpoch returns a replaced epoch that is still alive, before Envoy's
// own deadline for it, and holds connections (or they cannot be counted).
func (e *Envoy) drainingEpoch() (DrainingEpoch, bool) {
	type old struct {
		p        *process
		deadline time.Time
	}
	var olds []old
	e.mu.Lock()
	for p := range e.procs {
		if p != e.cur && !p.exited() {
			olds = append(olds, old{p, e.replaced[p]})
		}
	}
	e.mu.Unlock()
	now := time.Now()
	for _, o := range olds {
		if !now.Before(o.deadline) {
			continue // past Envoy's own deadline (or never replaced): not ours to wait for
		}
		n, err := e.epochConnections(o.p)
		if err != nil {
			n = -1
		}
		listening, err := e.epochListening(o.p)
		if err != nil {
			listening = true // unknown: wait, as for connections that cannot be counted
		}
		if n != 0 || listening {
			return DrainingEpoch{Epoch: o.p.epoch, Pid: o.p.pid, Connections: n, Listening: listening, Left: o.deadline.Sub(now)}, true
		}
	}
	return DrainingEpoch{}, false
}

// waitEpochLive waits until epoch p answers on the admin port as LIVE.
func (e *Envoy) waitEpochLive(ctx context.Context, p *process, cfg ProxyConfig) error {
	tick := time.NewTicker(epochPoll)
	defer tick.Stop()
	checked := false
	for {
		select {
		case <-p.done:
			return fmt.Errorf("it exited while starting: %s", exitText(p.waitErr))
		case <-ctx.Done():
			return fmt.Errorf("it was not LIVE in time: %w", ctx.Err())
		case <-tick.C:
		}
		if !checked {
			b, err := os.ReadFile(p.adminAddressPath)
			if err != nil || len(strings.TrimSpace(string(b))) == 0 {
				continue
			}
			if err := checkAdminAddress(strings.TrimSpace(string(b)), cfg); err != nil {
				return err
			}
			checked = true
		}
		pollCtx, cancel := context.WithTimeout(ctx, adminCallTimeout)
		si, err := e.admin.ServerInfo(pollCtx)
		cancel()
		if err == nil && si.CommandLineOptions.RestartEpoch == p.epoch && si.State == "LIVE" {
			return e.resourcesAccepted(ctx, p)
		}
	}
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// abandon kills an epoch that never became the serving one. SIGKILL, not
// SIGTERM: an Envoy that shuts down cleanly tells its hot-restart parent to
// terminate too, and that parent is the one serving.
func (e *Envoy) abandon(p *process) {
	p.signalGroup(syscall.SIGKILL)
	<-p.done
}

// recover restores what a failed epoch took from the serving one; it
// returns a sentence for the operator.
func (e *Envoy) recover(ctx context.Context, old *process, epoch int) string {
	if old.exited() {
		return "the serving epoch has exited too"
	}
	cfg := e.config()
	cleared, err := hostfiles.ClearInitializingFlag(cfg.BaseID)
	if err != nil {
		e.log.Warnf("hot restart: %v", err)
	}
	pollCtx, cancel := context.WithTimeout(ctx, adminCallTimeout)
	si, adminErr := e.admin.ServerInfo(pollCtx)
	cancel()
	if adminErr == nil && si.CommandLineOptions.RestartEpoch == old.epoch {
		if err != nil {
			return fmt.Sprintf("epoch %d keeps serving, but later hot restarts may be refused: %v", old.epoch, err)
		}
		return fmt.Sprintf("epoch %d keeps serving with its admin API", old.epoch)
	}
	if !cleared && err != nil {
		return fmt.Sprintf("epoch %d keeps serving traffic but lost its admin API, and it cannot be restored: %v", old.epoch, err)
	}
	e.log.Warnf("envoy epoch %d lost its admin listener to the failed epoch; restoring it by hot restarting the serving configuration as epoch %d", old.epoch, epoch)
	p, err := e.startEpoch(cfg, old.files.Copy, epoch)
	if err == nil {
		if err = e.waitEpochLive(ctx, p, cfg); err == nil {
			e.setServing(p)
			e.markReplaced(old, cfg)
			return fmt.Sprintf("the serving configuration was restored as epoch %d (pid %d), with its admin API", epoch, p.pid)
		}
		e.abandon(p)
		_, _ = hostfiles.ClearInitializingFlag(cfg.BaseID)
	}
	return fmt.Sprintf("epoch %d keeps serving traffic but lost its admin API (restoring it failed: %v)", old.epoch, err)
}

// sameIdentity refuses a new epoch of another base id or admin address, in
// both paths that start one (a hot restart, a drain and restart): the
// epochs share the one and the agent finds them by the other.
// service/config's restart-only keys refuse such a reload first, with the
// key's name; this keeps the package safe on its own.
func sameIdentity(cur, next ProxyConfig) error {
	if next.BaseID != cur.BaseID || next.AdminPort != cur.AdminPort || next.AdminSocket != cur.AdminSocket {
		return errors.New("base id and admin address cannot change in a reload")
	}
	return nil
}
