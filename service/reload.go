//go:build linux

package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/envoy-agent/envoy-agent/envoy"
	"github.com/envoy-agent/envoy-agent/envoy/epochfiles"
	"github.com/envoy-agent/envoy-agent/envoy/inplace"
	"github.com/envoy-agent/envoy-agent/envoy/versions"
	"github.com/envoy-agent/envoy-agent/service/config"
	"github.com/envoy-agent/envoy-agent/service/control"
)

// errConfig marks reload errors that are about the configuration itself.
type errConfig struct{ error }

func (e errConfig) Unwrap() error { return e.error }

// preparedReload is a reload whose files were read and checked: the new
// configuration, the private copy of its bootstrap that the new epoch will
// run, and the binary's hot-restart version. steps times each part.
type preparedReload struct {
	start   time.Time
	from    int // the serving epoch when it was prepared
	cfg     *config.Config
	version string
	// plan is the reload as checkReload decided it, once: its path (in
	// place, with reload_method "auto", when the serving epoch can take the
	// change; a hot restart; a drain and restart when hot restart is
	// compiled out of the serving Envoy or the new binary: drainrestart.go)
	// and what that path needs. applyReload completes the new epoch's
	// settings and hands it to Envoy.Reload.
	plan  envoy.ReloadPlan
	steps reloadSteps
	// why says, with reload_method "auto", why a new epoch is needed.
	why string
}

// reloadSteps is how long each part of one reload took, for the log (the
// breakdown README gives comes from it).
type reloadSteps struct {
	load, copy, validate, versions, plan, hotRestart, inPlace time.Duration
}

// took is the reload's own work: the steps it ran one after the other (the
// versions run beside validation; the wait for a draining epoch is
// WaitedMs, apart).
func (st reloadSteps) took() time.Duration {
	return st.load + st.copy + st.validate + st.plan + st.hotRestart + st.inPlace
}

func (st reloadSteps) fields() logrus.Fields {
	f := logrus.Fields{"load_ms": ms(st.load), "copy_ms": ms(st.copy), "validate_ms": ms(st.validate),
		"versions_ms": ms(st.versions), "hot_restart_ms": ms(st.hotRestart)}
	if st.inPlace > 0 {
		f["in_place_ms"] = ms(st.inPlace)
		delete(f, "hot_restart_ms")
	}
	if st.plan > 0 {
		f["plan_ms"] = ms(st.plan)
	}
	return f
}

// ms is d in milliseconds, with a tenth.
func ms(d time.Duration) float64 { return float64(d.Microseconds()/100) / 10 }

// prepareReload is a reload's first half: RELOADING=1, re-read and check
// the files. A refusal is logged and answered at once, READY=1 with the
// reason in STATUS= (STATUS= only when nested: another reload, whose files
// were good, is still under way).
func (s *supervisor) prepareReload(nested bool) (*preparedReload, control.ReloadResult) {
	start := time.Now()
	from := s.proxy.Epoch()
	if !nested {
		s.notify.Reloading(s.reloadingStatus())
		s.notify.ExtendTimeout(s.config().ReloadBound())
	}
	p, err := s.checkReload()
	if err == nil {
		p.start, p.from = start, from
		return p, control.ReloadResult{}
	}
	took := time.Since(start)
	res := control.ReloadResult{Epoch: s.proxy.Epoch(), TookMs: took.Milliseconds(), Error: err.Error(),
		Config: errors.As(err, new(errConfig)) || errors.As(err, new(*config.ConfigError))}
	s.reloadFailed(start, res, err)
	status := fmt.Sprintf("%s; last reload failed: %s", s.liveStatus(), firstLine(err.Error()))
	if nested {
		s.notify.Status(status)
	} else {
		s.notify.Ready(status)
	}
	return nil, res
}

// reloadFailed logs and counts a reload that failed after start.
func (s *supervisor) reloadFailed(start time.Time, res control.ReloadResult, err error) {
	took := time.Since(start)
	s.metrics.reloadSeconds.Set(took.Seconds())
	s.metrics.reloadFailures.Inc()
	s.report.reloadDone(start, res)
	s.log.WithFields(logrus.Fields{"event": "reload", "ok": false, "epoch": res.Epoch, "pid": s.proxy.Pid(),
		"took_ms": took.Milliseconds(), "reason": firstLine(err.Error())}).
		Errorf("reload failed after %s; epoch %d keeps serving: %v", took.Round(time.Millisecond), res.Epoch, err)
}

// checkReload re-reads the TOML, refuses keys a reload cannot change,
// copies the bootstrap and validates that copy while the binary's versions
// are asked (from the cache when it has not changed), and compares its
// hot-restart version with the serving Envoy's.
func (s *supervisor) checkReload() (*preparedReload, error) {
	t := time.Now()
	old := s.config()
	cfg, err := config.LoadConfig(old.File)
	if err != nil {
		return nil, err
	}
	if keys := config.RestartOnlyChanges(old, cfg); len(keys) > 0 {
		return nil, errConfig{fmt.Errorf("a reload cannot change %s: restart the service to apply it", strings.Join(keys, ", "))}
	}
	p := &preparedReload{cfg: cfg}
	p.steps.load = time.Since(t)
	ctx, cancel := context.WithTimeout(context.Background(), config.ValidateTimeout)
	defer cancel()
	type answer struct {
		version string
		err     error
		took    time.Duration
	}
	hr := make(chan answer, 1)
	go func() {
		t := time.Now()
		v, err := s.versions.HotRestartVersion(ctx, cfg.Envoy.BinaryPath)
		hr <- answer{v, err, time.Since(t)}
	}()
	// One copy of the bootstrap: validated, then run. Reading the file twice
	// would validate one text and run another if it changed in between.
	copied, err := s.copyAndValidate(ctx, cfg, &p.steps)
	if err != nil {
		<-hr
		return nil, err
	}
	v := <-hr
	p.steps.versions = v.took
	if v.err != nil {
		err = errConfig{fmt.Errorf("envoy.binary_path: %w", v.err)}
	}
	if err == nil {
		if s.hotRestartVersion() == "" {
			s.learnVersion() // a reload asked for right at READY=1
		}
		p.plan = envoy.ReloadPlan{Path: envoy.HotRestart, Copied: copied}
		if s.restartsInstead(v.version) {
			p.plan.Path = envoy.DrainRestart
		}
		if running := s.hotRestartVersion(); p.plan.Path == envoy.HotRestart && v.version != running {
			err = errConfig{fmt.Errorf("envoy.binary_path: %s has hot-restart version %s, the running Envoy %s: they cannot hot restart into each other; restart the service to switch", cfg.Envoy.BinaryPath, v.version, running)}
		}
	}
	if err != nil {
		_ = os.Remove(copied)
		return nil, err
	}
	p.version = v.version
	if cfg.Agent.InPlace() {
		t := time.Now()
		var inPlace *epochfiles.Plan
		inPlace, p.why = s.planInPlace(old, cfg, copied, p.plan.Path == envoy.DrainRestart)
		p.steps.plan = time.Since(t)
		if inPlace != nil {
			p.plan.Path, p.plan.InPlace = envoy.InPlace, inPlace
		}
	}
	return p, nil
}

// bootstrapReads is how many times a reload copies and validates the
// bootstrap when the file changes while it does (a writer was at work).
const bootstrapReads = 3

// copyAndValidate copies cfg's bootstrap and validates the copy, and then
// checks that the file still holds what was copied: a reload that read a
// file a writer had cut short (truncated, not yet written whole) would
// otherwise run whatever prefix of it validates, which can be a bootstrap
// with no routes, no endpoints or no listeners. When the file changed, it
// is read again, bootstrapReads times at most; then the reload is refused.
func (s *supervisor) copyAndValidate(ctx context.Context, cfg *config.Config, steps *reloadSteps) (string, error) {
	for read := 1; ; read++ {
		t := time.Now()
		c, err := s.proxy.CopyBootstrap(cfg.Envoy.ConfigPath)
		steps.copy += time.Since(t)
		if err != nil {
			return "", errConfig{fmt.Errorf("envoy.config_path: %w", err)}
		}
		t = time.Now()
		err = validateCopy(ctx, cfg, c.Path, &s.versions)
		steps.validate += time.Since(t)
		// Whether it validated or not: a torn copy's errors are not the
		// file's.
		if changed := c.SourceUnchanged(); changed != nil {
			_ = os.Remove(c.Path)
			if errors.Is(changed, epochfiles.ErrBootstrapChanged) && read < bootstrapReads {
				s.log.Warnf("reload: %v; reading it again", changed)
				continue
			}
			return "", errConfig{fmt.Errorf("envoy.config_path: %w, %d times in a row: write the new bootstrap to a file beside it and rename that over it (mv), then reload", changed, read)}
		}
		if err != nil {
			_ = os.Remove(c.Path)
			return "", err
		}
		return c.Path, nil
	}
}

// planInPlace is the in-place change from old to cfg, whose bootstrap copy
// is copied, or nil and why a new epoch is needed: the command line or the
// binary changed, the bootstrap outside its listeners, routes, clusters
// and moved secrets, or a listener beside its routes while Envoy can hot restart
// (drainRestart false).
func (s *supervisor) planInPlace(old, cfg *config.Config, copied string, drainRestart bool) (*epochfiles.Plan, string) {
	if !envoy.SameCommandLine(s.proxyConfig(old), s.proxyConfig(cfg)) {
		return nil, "Envoy's command line changes"
	}
	if !s.proxy.ServingBinaryIs(cfg.Envoy.BinaryPath) {
		return nil, "the Envoy binary changed (or the serving Envoy was adopted in a live upgrade)"
	}
	plan, err := s.proxy.PlanInPlace(copied)
	if err != nil {
		var restart *inplace.RestartError
		if errors.As(err, &restart) {
			return nil, restart.Reason
		}
		return nil, err.Error()
	}
	// Without hot restart, the other path closes every connection at once.
	if why := cutsRequests(plan.Change.Listeners, cfg); why != "" && !drainRestart {
		return nil, why // the plan's copy is p.plan.Copied, which the hot restart runs
	}
	return plan, ""
}

// cutsRequests says why listeners updated or removed in place would cut
// requests that a hot restart lets finish, or "": Envoy drains such a
// listener for drain_duration and then closes its connections, requests in
// flight included (measured: a 3 s request through a listener updated in
// place with a 1 s drain got EOF at 1.3 s), while a hot restart's old epoch
// serves them until parent_shutdown_duration, which the configuration
// check keeps longer than drain_duration. Routes changed alone, clusters
// and listeners added drain nothing (a 3 s request through a cluster
// updated, or removed, in place finished).
func cutsRequests(d inplace.Delta, cfg *config.Config) string {
	changed := slices.Concat(d.Updated, d.Removed)
	if len(changed) == 0 {
		return ""
	}
	return fmt.Sprintf("listeners %s change beside their routes: in place, their requests in flight would be cut after drain_duration (%s), a hot restart lets them run for parent_shutdown_duration (%s)",
		strings.Join(changed, ", "), cfg.Envoy.DrainDuration.D(), cfg.Envoy.ParentShutdownDuration.D())
}

// discardReload removes the bootstrap copy of a prepared reload that will
// not run (a later one replaced it, or a stop came).
func (s *supervisor) discardReload(p *preparedReload) {
	_ = os.Remove(p.plan.Copied)
}

// applyReload is a reload's second half: take the prepared configuration
// by the path its plan chose, READY=1 whatever happened.
func (s *supervisor) applyReload(p *preparedReload) control.ReloadResult {
	if p.plan.Path == envoy.InPlace {
		return s.applyInPlace(p)
	}
	cfg := p.cfg
	s.beginReload(false)
	s.notify.Status(s.reloadingStatus())
	t := time.Now()
	var epoch int
	var note string
	var err error
	if p.plan.Path == envoy.DrainRestart {
		epoch, note, err = s.drainAndRestart(cfg, p.plan, p.version)
	} else {
		plan := p.plan
		plan.Config = s.proxyConfig(cfg)
		startCtx, cancelStart := context.WithTimeout(context.Background(), cfg.Agent.StartTimeout.D())
		var out envoy.ReloadOutcome
		out, err = s.proxy.Reload(startCtx, plan)
		epoch = out.Epoch
		cancelStart()
	}
	if err == nil {
		s.takeReloadedConfig(cfg, p.version)
	}
	p.steps.hotRestart = time.Since(t)
	s.endReload()
	took := p.steps.took()
	s.metrics.epoch.Set(float64(s.proxy.Epoch()))
	res := control.ReloadResult{OK: err == nil, Epoch: s.proxy.Epoch(), TookMs: took.Milliseconds(), Note: note}
	if cfg.Agent.InPlace() {
		res.Path, res.Changed = p.plan.Path.String(), p.why
	}
	if err != nil {
		res.Error = err.Error()
		s.reloadFailed(p.start, res, err)
		s.notify.Ready(fmt.Sprintf("%s; last reload failed: %s", s.liveStatus(), firstLine(err.Error())))
		return res
	}
	s.metrics.reloadSeconds.Set(took.Seconds())
	s.metrics.reloads.Inc()
	s.report.reloadDone(p.start, res)
	log := s.log.WithFields(logrus.Fields{"event": "reload", "ok": true, "epoch": epoch, "pid": s.proxy.Pid(), "took_ms": took.Milliseconds()}).
		WithFields(p.steps.fields())
	if res.Path != "" {
		log = log.WithFields(logrus.Fields{"path": res.Path, "why": res.Changed})
	}
	log.Infof("reloaded in %s: epoch %d is serving", took.Round(time.Millisecond), epoch)
	s.notify.Ready(fmt.Sprintf("%s; reloaded %s", s.liveStatus(), time.Now().Format(time.RFC3339)))
	return res
}

// applyInPlace changes the serving epoch's listeners and clusters as the
// prepared plan says, READY=1 whatever happened. No epoch starts: nothing
// drains but the listeners Envoy itself replaces.
func (s *supervisor) applyInPlace(p *preparedReload) control.ReloadResult {
	cfg := p.cfg
	t := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Agent.StartTimeout.D())
	_, err := s.proxy.Reload(ctx, p.plan)
	cancel()
	p.steps.inPlace = time.Since(t)
	took := p.steps.took()
	res := control.ReloadResult{OK: err == nil, Epoch: s.proxy.Epoch(), TookMs: took.Milliseconds(),
		Path: control.PathInPlace, Changed: p.plan.InPlace.Change.String()}
	if err != nil {
		s.metrics.reloadsInPlaceFailed.Inc()
		res.Error = err.Error()
		s.reloadFailed(p.start, res, err)
		s.notify.Ready(fmt.Sprintf("%s; last reload failed: %s", s.liveStatus(), firstLine(err.Error())))
		return res
	}
	s.takeReloadedConfig(cfg, p.version)
	s.metrics.reloadSeconds.Set(took.Seconds())
	s.metrics.reloadsInPlace.Inc()
	s.report.reloadDone(p.start, res)
	s.log.WithFields(logrus.Fields{"event": "reload", "ok": true, "epoch": res.Epoch, "pid": s.proxy.Pid(), "took_ms": took.Milliseconds(),
		"path": res.Path, "changed": res.Changed}).WithFields(p.steps.fields()).
		Infof("reloaded in place in %s: %s; epoch %d keeps serving", took.Round(time.Millisecond), res.Changed, res.Epoch)
	s.notify.Ready(fmt.Sprintf("%s; reloaded in place %s", s.liveStatus(), time.Now().Format(time.RFC3339)))
	return res
}

// takeReloadedConfig makes cfg, now running in an Envoy of hot-restart
// version version, the agent's configuration: drain settings, log settings,
// and what the next reload compares with.
func (s *supervisor) takeReloadedConfig(cfg *config.Config, version string) {
	a := cfg.Agent
	s.agent.SetDrainSettings(a.TerminationDrainDuration.D(), a.MinDrainDuration.D(), a.ExitOnZeroActiveConnections)
	s.applyLogSettings(cfg)
	s.reloaded(cfg, version)
}

// validateCopy runs `envoy --mode validate` on copied, the private copy of
// cfg's bootstrap that the new epoch will run; problems name the
// operator's file, not the copy.
func validateCopy(ctx context.Context, cfg *config.Config, copied string, versions *versions.Cache) error {
	c := *cfg
	c.Envoy.ConfigPath = copied
	err := config.ValidateBootstrap(ctx, &c, versions)
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
// it was replaced). progress hears at once that it waits; STATUS= says so
// meanwhile; the note goes into the reload's answer.
func (s *supervisor) waitForDrainingEpochs(ctx context.Context, progress func(string)) (time.Duration, string, error) {
	var last envoy.DrainingEpoch
	waited, err := s.proxy.WaitForDrainingEpochs(ctx, func(d envoy.DrainingEpoch) {
		if last.Pid == 0 {
			msg := fmt.Sprintf("the configuration is valid; waiting for epoch %d (pid %d, %s) to finish draining, at most %s (until its parent_shutdown_duration ends it), before starting a new epoch",
				d.Epoch, d.Pid, drainingWhat(d), d.Left.Round(time.Second))
			s.log.WithFields(logrus.Fields{"event": "reload_wait", "epoch": d.Epoch, "pid": d.Pid, "connections": d.Connections, "left_ms": d.Left.Milliseconds()}).
				Infof("reload: %s", msg)
			s.notify.ExtendTimeout(d.Left + s.config().ReloadBound())
			if progress != nil {
				progress(msg)
			}
		}
		last = d
		s.notify.Status(fmt.Sprintf("%s; reload waiting for epoch %d (pid %d) to finish draining: %s, at most %s left",
			s.liveStatus(), d.Epoch, d.Pid, drainingWhat(d), d.Left.Round(time.Second)))
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

// drainingWhat says what a draining epoch still holds.
func drainingWhat(d envoy.DrainingEpoch) string {
	what := fmt.Sprintf("%d active connections", d.Connections)
	if d.Listening {
		what += ", still accepting new ones"
	}
	return what
}

// requestReload asks for a reload and waits for its result; reloads are
// refused until Envoy is first LIVE and once a stop has begun. progress,
// when not nil, hears at once what the reload waits for.
func (s *supervisor) requestReload(ctx context.Context, progress func(string)) control.ReloadResult {
	if !s.live() || s.agent.Draining() {
		res := control.ReloadResult{Error: "envoy is not serving (starting or stopping): nothing to reload", Epoch: s.proxy.Epoch()}
		s.log.Warnf("reload refused: %s", res.Error)
		return res
	}
	select {
	case res := <-s.reloader.Request(progress):
		return res
	case <-ctx.Done():
		return control.ReloadResult{Error: "the reload request was cancelled; the reload goes on"}
	}
}
