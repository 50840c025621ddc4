//go:build linux

package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/envoy-agent/envoy-agent/service/config"
	"github.com/envoy-agent/envoy-agent/service/control"

	"github.com/envoy-agent/envoy-agent/envoy"
	"github.com/sirupsen/logrus"
)

// reloader runs reloads one at a time. A request made while one runs
// waits for the next run, which serves every request made meanwhile (they
// are coalesced): each sees the files as they were when that run began.
// Before it takes its batch, a run waits (wait) until no epoch that the
// last reload replaced still serves requests, so that the requests made
// during that wait join the run, and no epoch is cut in mid-request.
type reloader struct {
	run  func() control.ReloadResult
	wait func(context.Context) (time.Duration, string, error) // may be nil

	ctx    context.Context // ended by close: a stop ends a wait
	cancel context.CancelFunc

	mu      sync.Mutex
	running bool
	closed  bool
	pending []chan control.ReloadResult
	idle    chan struct{} // closed while no run is going on
}

func newReloader(run func() control.ReloadResult) *reloader {
	idle := make(chan struct{})
	close(idle)
	ctx, cancel := context.WithCancel(context.Background())
	return &reloader{run: run, idle: idle, ctx: ctx, cancel: cancel}
}

// request asks for a reload; the channel gets its result.
func (r *reloader) request() <-chan control.ReloadResult {
	ch := make(chan control.ReloadResult, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		ch <- control.ReloadResult{Error: "the agent is stopping"}
		return ch
	}
	r.pending = append(r.pending, ch)
	if !r.running {
		r.running = true
		r.idle = make(chan struct{})
		go r.loop()
	}
	return ch
}

func (r *reloader) loop() {
	for {
		var waited time.Duration
		var note string
		var waitErr error
		r.mu.Lock()
		asked := len(r.pending) > 0
		r.mu.Unlock()
		if asked && r.wait != nil {
			waited, note, waitErr = r.wait(r.ctx)
		}
		r.mu.Lock()
		batch := r.pending
		r.pending = nil
		if len(batch) == 0 {
			r.running = false
			close(r.idle)
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		var res control.ReloadResult
		if waitErr != nil {
			res = control.ReloadResult{Error: waitErr.Error(), TookMs: waited.Milliseconds()}
		} else {
			res = r.run()
			res.TookMs += waited.Milliseconds()
		}
		res.WaitedMs = waited.Milliseconds()
		res.Note = strings.Join(slices.DeleteFunc([]string{note, res.Note}, func(n string) bool { return n == "" }), "; ")
		for _, ch := range batch {
			ch <- res
		}
	}
}

// closeWithin refuses new requests, ends a wait for a draining epoch, and
// waits for the reload under way, if any, and those already asked for, up
// to d; it reports whether they ended. A stop must not wait on a reload
// that hangs.
func (r *reloader) closeWithin(d time.Duration) bool {
	r.cancel()
	r.mu.Lock()
	r.closed = true
	idle := r.idle
	r.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-idle:
		return true
	case <-t.C:
		return false
	}
}

// errConfig marks reload errors that are about the configuration itself.
type errConfig struct{ error }

func (e errConfig) Unwrap() error { return e.error }

// reload is one reload: RELOADING=1, re-read and check the files, hot
// restart Envoy, READY=1 whatever happened.
func (s *supervisor) reload() control.ReloadResult {
	start := time.Now()
	s.setReloading(true)
	s.notify.Reloading(s.reloadingStatus())
	s.notify.ExtendTimeout(2*s.config().Agent.StartTimeout.D() + config.ValidateTimeout)
	epoch, err := s.reloadSteps()
	s.setReloading(false)
	took := time.Since(start)
	s.metrics.reloadSeconds.Set(took.Seconds())
	s.metrics.epoch.Set(float64(s.proxy.Epoch()))
	res := control.ReloadResult{OK: err == nil, Epoch: s.proxy.Epoch(), TookMs: took.Milliseconds(), Note: s.takeReloadNote()}
	defer func() { s.report.reloadDone(start, res) }()
	if err != nil {
		s.metrics.reloadFailures.Inc()
		res.Error = err.Error()
		res.Config = errors.As(err, new(errConfig)) || errors.As(err, new(*config.ConfigError))
		s.log.WithFields(logrus.Fields{"event": "reload", "ok": false, "epoch": res.Epoch, "pid": s.proxy.Pid(),
			"took_ms": took.Milliseconds(), "reason": firstLine(err.Error())}).
			Errorf("reload failed after %s; epoch %d keeps serving: %v", took.Round(time.Millisecond), res.Epoch, err)
		s.notify.Ready(fmt.Sprintf("%s; last reload failed: %s", s.liveStatus(), firstLine(err.Error())))
		return res
	}
	s.metrics.reloads.Inc()
	s.log.WithFields(logrus.Fields{"event": "reload", "ok": true, "epoch": epoch, "pid": s.proxy.Pid(), "took_ms": took.Milliseconds()}).
		Infof("reloaded in %s: epoch %d is serving", took.Round(time.Millisecond), epoch)
	s.notify.Ready(fmt.Sprintf("%s; reloaded %s", s.liveStatus(), time.Now().Format(time.RFC3339)))
	return res
}

func (s *supervisor) reloadSteps() (int, error) {
	old := s.config()
	cfg, err := config.LoadConfig(old.File)
	if err != nil {
		return 0, err
	}
	if keys := config.RestartOnlyChanges(old, cfg); len(keys) > 0 {
		return 0, errConfig{fmt.Errorf("a reload cannot change %s: restart the service to apply it", strings.Join(keys, ", "))}
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Agent.StartTimeout.D()+config.ValidateTimeout)
	defer cancel()
	// One copy of the bootstrap: validated, then run. Reading the file twice
	// would validate one text and run another if it changed in between.
	copied, err := s.proxy.CopyBootstrap(cfg.Envoy.ConfigPath)
	if err != nil {
		return 0, errConfig{fmt.Errorf("envoy.config_path: %w", err)}
	}
	handed := false
	defer func() {
		if !handed {
			_ = os.Remove(copied)
		}
	}()
	if err := validateCopy(ctx, cfg, copied); err != nil {
		return 0, err
	}
	version, err := envoy.HotRestartVersion(ctx, cfg.Envoy.BinaryPath)
	if err != nil {
		return 0, errConfig{fmt.Errorf("envoy.binary_path: %w", err)}
	}
	if s.hotRestartVersion() == "" {
		s.learnVersion() // a reload asked for right at READY=1
	}
	if s.restartsInstead(version) {
		handed = true
		return s.drainAndRestart(cfg, copied, version)
	}
	if running := s.hotRestartVersion(); version != running {
		return 0, errConfig{fmt.Errorf("envoy.binary_path: %s has hot-restart version %s, the running Envoy %s: they cannot hot restart into each other; restart the service to switch", cfg.Envoy.BinaryPath, version, running)}
	}
	pc := s.proxyConfig(cfg)
	startCtx, cancelStart := context.WithTimeout(context.Background(), cfg.Agent.StartTimeout.D())
	defer cancelStart()
	handed = true
	epoch, err := s.proxy.HotRestartFrom(startCtx, pc, copied)
	if err != nil {
		return 0, err
	}
	s.takeReloadedConfig(cfg, version)
	return epoch, nil
}

// takeReloadedConfig makes cfg, now running in an Envoy of hot-restart
// version version, the agent's configuration: drain settings, log settings,
// and what the next reload compares with.
func (s *supervisor) takeReloadedConfig(cfg *config.Config, version string) {
	a := cfg.Agent
	s.agent.SetDrainSettings(a.TerminationDrainDuration.D(), a.MinDrainDuration.D(), a.ExitOnZeroActiveConnections)
	s.applyLogSettings(cfg)
	s.setConfig(cfg)
	s.setHotRestartVersion(version)
}

// validateCopy runs `envoy --mode validate` on copied, the private copy of
// cfg's bootstrap that the new epoch will run; problems name the
// operator's file, not the copy.
func validateCopy(ctx context.Context, cfg *config.Config, copied string) error {
	c := *cfg
	c.Envoy.ConfigPath = copied
	err := config.ValidateBootstrap(ctx, &c)
	var ce *config.ConfigError
	if errors.As(err, &ce) {
		for i := range ce.Problems {
			ce.Problems[i].File = strings.ReplaceAll(ce.Problems[i].File, copied, cfg.Envoy.ConfigPath)
			ce.Problems[i].Msg = strings.ReplaceAll(ce.Problems[i].Msg, copied, cfg.Envoy.ConfigPath)
		}
	}
	return err
}

// waitForDrainingEpochs is the reloader's wait: while the epoch that the
// last reload replaced still has downstream connections (requests in
// flight, or kept-alive connections), starting another epoch would end it
// at once (Envoy keeps two generations), so the next reload waits, at
// most until Envoy itself ends that epoch (parent_shutdown_duration after
// it was replaced). STATUS= says so meanwhile; the note goes into the
// reload's answer.
func (s *supervisor) waitForDrainingEpochs(ctx context.Context) (time.Duration, string, error) {
	var last envoy.DrainingEpoch
	waited, err := s.proxy.WaitForDrainingEpochs(ctx, func(d envoy.DrainingEpoch) {
		if last.Pid == 0 {
			s.log.WithFields(logrus.Fields{"event": "reload_wait", "epoch": d.Epoch, "pid": d.Pid, "connections": d.Connections, "left_ms": d.Left.Milliseconds()}).
				Infof("reload: waiting for epoch %d (pid %d, %d active connections) to finish draining, at most %s, before starting a new epoch",
					d.Epoch, d.Pid, d.Connections, d.Left.Round(time.Second))
			s.notify.ExtendTimeout(d.Left + 2*s.config().Agent.StartTimeout.D() + config.ValidateTimeout)
		}
		last = d
		s.notify.Status(fmt.Sprintf("%s; reload waiting for epoch %d (pid %d) to finish draining: %d active connections, at most %s left",
			s.liveStatus(), d.Epoch, d.Pid, d.Connections, d.Left.Round(time.Second)))
	})
	if last.Pid == 0 {
		return 0, "", err
	}
	note := fmt.Sprintf("waited %s for epoch %d (pid %d) to finish draining before starting a new epoch", waited.Round(time.Millisecond), last.Epoch, last.Pid)
	if err != nil {
		return waited, note, fmt.Errorf("the agent is stopping: %w", err)
	}
	s.log.WithFields(logrus.Fields{"event": "reload_wait", "epoch": last.Epoch, "pid": last.Pid, "waited_ms": waited.Milliseconds()}).Infof("reload: %s", note)
	return waited, note, nil
}

// requestReload asks for a reload and waits for its result; reloads are
// refused until Envoy is first LIVE and once a stop has begun.
func (s *supervisor) requestReload(ctx context.Context) control.ReloadResult {
	if !s.isLive() || s.agent.Draining() {
		res := control.ReloadResult{Error: "envoy is not serving (starting or stopping): nothing to reload", Epoch: s.proxy.Epoch()}
		s.log.Warnf("reload refused: %s", res.Error)
		return res
	}
	select {
	case res := <-s.reloader.request():
		return res
	case <-ctx.Done():
		return control.ReloadResult{Error: "the reload request was cancelled; the reload goes on"}
	}
}
