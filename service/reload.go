//go:build linux

// A reload, from the request down: the plan decided once (checkReload),
// the wait for a draining epoch, and the plan carried out by one call with
// one ending (applyReload, finishReload). The queue around it, one at a
// time with requests coalesced, is package reloadqueue.

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
	"github.com/envoy-agent/envoy-agent/service/config"
	"github.com/envoy-agent/envoy-agent/service/control"
	"github.com/envoy-agent/envoy-agent/service/reloadqueue"
)

// errConfig marks reload errors that are about the configuration itself.
type errConfig struct{ error }

func (e errConfig) Unwrap() error { return e.error }

// reloadPlan is one reload as checkReload decided it, complete: the
// configuration it takes, the hot-restart version of that configuration's
// binary, and the envoy.ReloadPlan that carries it out (its path, the new
// epoch's settings with hot-restart availability decided, the validated
// bootstrap copy, a drain and restart's settings, the in-place change, the
// bound of the call). It is a value: String prints it, which is what a dry
// run shows; applyReload carries it out once, and a plan made the other way
// round (the serving configuration planned as the new one, for a rollback)
// is carried out the same way.
type reloadPlan struct {
	cfg     *config.Config
	version string // the hot-restart version of cfg's binary
	// why says, with reload_method "auto", why a new epoch is needed ("" in
	// place).
	why   string
	envoy envoy.ReloadPlan
	// from is the serving epoch and its pid when the plan was made: what it
	// replaces, or changes in place.
	from, fromPid int
	steps         reloadSteps // how long each part of its check took
}

// String says what the plan does, in one line.
func (p *reloadPlan) String() string {
	s := fmt.Sprintf("from epoch %d (pid %d): %s", p.from, p.fromPid, p.envoy)
	if p.why != "" {
		s += "; a new epoch because " + p.why
	}
	return s
}

// reloadSteps is how long each part of one reload took, for the log (the
// breakdown README gives comes from it).
type reloadSteps struct {
	load, copy, validate, versions, plan time.Duration
}

// fields are the reload's steps as log fields; applied is how long its
// path's call took, named for the path (in_place_ms, hot_restart_ms,
// drain_restart_ms).
func (st reloadSteps) fields(path envoy.ReloadPath, applied time.Duration) logrus.Fields {
	f := logrus.Fields{"load_ms": ms(st.load), "copy_ms": ms(st.copy), "validate_ms": ms(st.validate),
		"versions_ms": ms(st.versions), path.String() + "_ms": ms(applied)}
	if st.plan > 0 {
		f["plan_ms"] = ms(st.plan)
	}
	return f
}

// ms is d in milliseconds, with a tenth.
func ms(d time.Duration) float64 { return float64(d.Microseconds()/100) / 10 }

// prepareReload is a reload's first half: RELOADING=1, re-read and check
// the files (checkReload). A refusal ends the reload at once (finishReload:
// READY=1 with the reason in STATUS=, or STATUS= alone when nested: another
// reload, whose files were good, is still under way).
func (s *supervisor) prepareReload(nested bool) (*reloadPlan, control.ReloadResult) {
	start := time.Now()
	if !nested {
		s.notify.Reloading(s.reloadingStatus())
		s.notify.ExtendTimeout(s.config().ReloadBound(0))
	}
	p, err := s.checkReload()
	if err == nil {
		return p, control.ReloadResult{}
	}
	res := control.ReloadResult{Epoch: s.proxy.Epoch(), Error: err.Error(),
		Config: errors.As(err, new(errConfig)) || errors.As(err, new(*config.ConfigError))}
	return nil, s.finishReload(reloadqueue.Run{Start: start}, nil, 0, res, err, nested)
}

// checkReload re-reads the TOML, refuses keys a reload cannot change,
// copies the bootstrap and validates that copy while the binary's
// hot-restart version is asked (from the cache when it has not changed),
// decides the path from that version and the serving Envoy's (reloadPath),
// and, with reload_method "auto", whether the serving epoch can take the
// change in place. It returns the whole plan.
func (s *supervisor) checkReload() (*reloadPlan, error) {
	t := time.Now()
	old := s.config()
	cfg, err := config.LoadConfig(old.File)
	if err != nil {
		return nil, err
	}
	if keys := config.RestartOnlyChanges(old, cfg); len(keys) > 0 {
		return nil, errConfig{fmt.Errorf("a reload cannot change %s: restart the service to apply it", strings.Join(keys, ", "))}
	}
	p := &reloadPlan{cfg: cfg, from: s.proxy.Epoch(), fromPid: s.proxy.Pid()}
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
		v, err := s.envoys.HotRestartVersion(ctx, cfg.Envoy.BinaryPath)
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
	path := envoy.HotRestart
	if v.err != nil {
		err = errConfig{fmt.Errorf("envoy.binary_path: %w", v.err)}
	} else {
		if s.hotRestartVersion() == "" {
			s.learnVersion() // a reload asked for right at READY=1
		}
		running := s.hotRestartVersion()
		if path, err = reloadPath(running, v.version); err != nil {
			err = errConfig{fmt.Errorf("envoy.binary_path: %s has hot-restart version %s, the running Envoy %s: they cannot hot restart into each other; restart the service to switch", cfg.Envoy.BinaryPath, v.version, running)}
		}
	}
	if err != nil {
		_ = os.Remove(copied)
		return nil, err
	}
	p.version = v.version
	p.envoy = envoy.ReloadPlan{Path: path, Config: s.proxyConfig(cfg, v.version), Copied: copied}
	if path == envoy.DrainRestart {
		p.envoy.Restart = s.restartPlan(cfg, p.fromPid)
	}
	if cfg.Agent.InPlace() {
		t := time.Now()
		var inPlace *epochfiles.Plan
		inPlace, p.why = s.planInPlace(old, cfg, copied, path == envoy.DrainRestart)
		p.steps.plan = time.Since(t)
		if inPlace != nil {
			p.envoy.Path, p.envoy.InPlace = envoy.InPlace, inPlace
		}
	}
	p.envoy.Timeout = reloadTimeout(cfg, p.envoy.Path)
	return p, nil
}

// errHotRestartVersions is a reload to a binary that cannot hot restart
// from the serving Envoy: their hot-restart versions differ.
var errHotRestartVersions = errors.New("the hot-restart versions differ")

// reloadPath is how a reload goes from the serving Envoy, of hot-restart
// version serving, to a binary of hot-restart version next, before the
// in-place check: a drain and restart when either has hot restart compiled
// out (an Envoy binary upgrade included), else a hot restart, which the two
// can do only when their versions are equal (errHotRestartVersions
// otherwise). A reload decides its path with it, and the installed-Envoy
// watch says with it what a reload would do.
func reloadPath(serving, next string) (envoy.ReloadPath, error) {
	if serving == envoy.HotRestartDisabled || next == envoy.HotRestartDisabled {
		return envoy.DrainRestart, nil
	}
	if next != serving {
		return envoy.HotRestart, errHotRestartVersions
	}
	return envoy.HotRestart, nil
}

// reloadTimeout bounds the call that carries a reload of cfg out by path:
// the new epoch's start (start_timeout) for a hot restart, and the files'
// apply, bounded the same, in place; a drain and restart drains (at most
// termination_drain_duration), stops the drained Envoy, and starts the
// new one and, should it fail, the previous one (start_timeout each).
func reloadTimeout(cfg *config.Config, path envoy.ReloadPath) time.Duration {
	a := cfg.Agent
	if path == envoy.DrainRestart {
		return a.TerminationDrainDuration.D() + drainRestartStopBound + 2*a.StartTimeout.D()
	}
	return a.StartTimeout.D()
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
		err = s.validateCopy(ctx, cfg, c.Path)
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

// validateCopy runs `envoy --mode validate` on copied, the private copy of
// cfg's bootstrap that the new epoch will run; problems name the
// operator's file, not the copy.
func (s *supervisor) validateCopy(ctx context.Context, cfg *config.Config, copied string) error {
	c := *cfg
	c.Envoy.ConfigPath = copied
	err := s.envoys.Validate(ctx, &c)
	var ce *config.ConfigError
	if errors.As(err, &ce) {
		for i := range ce.Problems {
			ce.Problems[i].File = strings.ReplaceAll(ce.Problems[i].File, copied, cfg.Envoy.ConfigPath)
			ce.Problems[i].Msg = strings.ReplaceAll(ce.Problems[i].Msg, copied, cfg.Envoy.ConfigPath)
		}
	}
	return err
}

// planInPlace is the in-place change from old to cfg, whose bootstrap copy
// is copied, or nil and why a new epoch is needed: the command line or the
// binary changed, the bootstrap outside its listeners, routes, clusters
// and moved secrets, or a listener beside its routes while Envoy can hot
// restart (drainRestart false).
func (s *supervisor) planInPlace(old, cfg *config.Config, copied string, drainRestart bool) (*epochfiles.Plan, string) {
	// With the serving binary's version on both sides: whether the binary
	// changed is the next question.
	serving := s.hotRestartVersion()
	if !envoy.SameCommandLine(s.proxyConfig(old, serving), s.proxyConfig(cfg, serving)) {
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
		return nil, why // the plan's copy is the reload's copy, which the hot restart runs
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

// discardReload removes the bootstrap copy of a planned reload that will
// not run (a later one replaced it, or a stop came).
func (s *supervisor) discardReload(p *reloadPlan) {
	_ = os.Remove(p.envoy.Copied)
}

// applyReload is a reload's second half: the plan carried out by one call,
// after one step of the phase, then the one ending (finishReload). run is
// what the queue's run did before: when it began, what it waited for.
func (s *supervisor) applyReload(p *reloadPlan, run reloadqueue.Run) control.ReloadResult {
	s.beginReload(p.envoy.Path)
	if p.envoy.Path != envoy.InPlace {
		s.notify.Status(s.reloadingStatus())
	}
	if p.envoy.Path == envoy.DrainRestart {
		s.notify.ExtendTimeout(p.cfg.ReloadBound(p.envoy.Restart.MaxDrain))
	}
	t := time.Now()
	out, err := s.proxy.Reload(context.Background(), p.envoy)
	applied := time.Since(t)
	if err == nil {
		s.takeReloadedConfig(p.cfg, p.version)
	}
	s.endReload()
	res := control.ReloadResult{OK: err == nil, Epoch: s.proxy.Epoch(), WaitedMs: run.Waited.Milliseconds()}
	if p.cfg.Agent.InPlace() {
		res.Path, res.Changed = p.envoy.Path.String(), p.why
		if p.envoy.Path == envoy.InPlace {
			res.Changed = p.envoy.InPlace.Change.String()
		}
	}
	if err != nil {
		res.Error = err.Error()
	}
	res.Note = strings.Join(slices.DeleteFunc([]string{run.Note, s.restartNote(p, out, err)}, func(n string) bool { return n == "" }), "; ")
	return s.finishReload(run, p, applied, res, err, false)
}

// finishReload is the one ending of a reload, refused before it had a plan
// (p nil), failed or done: the answer's time (from run's start, its wait
// included), the metrics, the status report, the log line (with each
// step's time, applied the plan's call), and READY=1 with STATUS=
// (STATUS= alone when nested: a refusal while another reload, whose files
// were good, is under way).
func (s *supervisor) finishReload(run reloadqueue.Run, p *reloadPlan, applied time.Duration, res control.ReloadResult, err error, nested bool) control.ReloadResult {
	took := time.Since(run.Start)
	res.TookMs = took.Milliseconds()
	path := envoy.HotRestart
	if p != nil {
		path = p.envoy.Path
	}
	s.metrics.epoch.Set(float64(s.proxy.Epoch()))
	s.metrics.reloadSeconds.Set(took.Seconds())
	s.report.reloadDone(run.Start, res)
	log := s.log.WithFields(logrus.Fields{"event": "reload", "ok": err == nil, "epoch": res.Epoch, "pid": s.proxy.Pid(), "took_ms": took.Milliseconds()})
	if res.WaitedMs > 0 {
		log = log.WithField("waited_ms", res.WaitedMs)
	}
	if err != nil {
		s.metrics.reloadFailures.Inc()
		if p != nil && path == envoy.InPlace {
			s.metrics.reloadsInPlaceFailed.Inc()
		}
		log.WithField("reason", firstLine(err.Error())).
			Errorf("reload failed after %s; epoch %d keeps serving: %v", took.Round(time.Millisecond), res.Epoch, err)
		status := fmt.Sprintf("%s; last reload failed: %s", s.liveStatus(), firstLine(err.Error()))
		if nested {
			s.notify.Status(status)
		} else {
			s.notify.Ready(status)
		}
		return res
	}
	log = log.WithFields(p.steps.fields(path, applied))
	if path == envoy.InPlace {
		s.metrics.reloadsInPlace.Inc()
		log.WithFields(logrus.Fields{"path": res.Path, "changed": res.Changed}).Infof("reloaded in place in %s: %s; epoch %d keeps serving", took.Round(time.Millisecond), res.Changed, res.Epoch)
		s.notify.Ready(fmt.Sprintf("%s; reloaded in place %s", s.liveStatus(), time.Now().Format(time.RFC3339)))
		return res
	}
	s.metrics.reloads.Inc()
	if res.Path != "" {
		log = log.WithFields(logrus.Fields{"path": res.Path, "why": res.Changed})
	}
	log.Infof("reloaded in %s: epoch %d is serving", took.Round(time.Millisecond), res.Epoch)
	s.notify.Ready(fmt.Sprintf("%s; reloaded %s", s.liveStatus(), time.Now().Format(time.RFC3339)))
	return res
}

// takeReloadedConfig makes cfg, now running in an Envoy of hot-restart
// version version, the agent's configuration: drain settings, log settings,
// and what the next reload compares with.
func (s *supervisor) takeReloadedConfig(cfg *config.Config, version string) {
	a := cfg.Agent
	s.runner.SetDrainSettings(a.TerminationDrainDuration.D(), a.MinDrainDuration.D(), a.ExitOnZeroActiveConnections)
	s.applyLogSettings(cfg)
	s.reloaded(cfg, version)
}

// waitForDrainingEpochs is the reloader's wait: while the epoch that the
// last reload replaced still has downstream connections (requests in
// flight, or kept-alive connections), starting another epoch would end it
// at once (Envoy keeps two generations), so the next reload waits, at
// most until Envoy itself ends that epoch (parent_shutdown_duration after
// it was replaced). progress hears at once that it waits; STATUS= says so
// meanwhile, and EXTEND_TIMEOUT_USEC covers the wait (ReloadBound); the
// note goes into the reload's answer.
func (s *supervisor) waitForDrainingEpochs(ctx context.Context, progress func(string)) (time.Duration, string, error) {
	var last envoy.DrainingEpoch
	waited, err := s.proxy.WaitForDrainingEpochs(ctx, func(d envoy.DrainingEpoch) {
		if last.Pid == 0 {
			msg := fmt.Sprintf("the configuration is valid; waiting for epoch %d (pid %d, %s) to finish draining, at most %s (until its parent_shutdown_duration ends it), before starting a new epoch",
				d.Epoch, d.Pid, drainingWhat(d), d.Left.Round(time.Second))
			s.log.WithFields(logrus.Fields{"event": "reload_wait", "epoch": d.Epoch, "pid": d.Pid, "connections": d.Connections, "left_ms": d.Left.Milliseconds()}).
				Infof("reload: %s", msg)
			s.notify.ExtendTimeout(s.config().ReloadBound(d.Left))
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
	if !s.live() {
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
