//go:build linux

// A reload, from the request down: the plan decided once (checkReload),
// the wait for a draining epoch, and the plan carried out by one call with
// one ending (applyReload, finishReload). The queue around it, one at a
// time with requests coalesced, is package reloadqueue.

package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/envoy"
	"github.com/envoy-agent/envoy-agent/envoy/certs"
	"github.com/envoy-agent/envoy-agent/envoy/epochfiles"
	"github.com/envoy-agent/envoy-agent/envoy/inplace"
	"github.com/envoy-agent/envoy-agent/internal/safefile"
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
	// files are the sums of the TOML and of the bootstrap's bytes the copy
	// was made of: what Envoy serves once the plan is carried out.
	files servedFiles
	steps reloadSteps // how long each part of its check took
}

// planInput is what checkReload plans from: by default the agent's own
// files, read now, for a reload that will run.
type planInput struct {
	// dry: a plan that will not run (a dry run): the copy goes through the
	// certificates' rewrite that serves and watches nothing, and the
	// caller removes it.
	dry bool
	// force takes files the reload guard rolled back.
	force bool
	// candidate is another configuration's files (`validate --plan`),
	// loaded, checked and validated by the client, with its binary's
	// hot-restart version; only with dry.
	candidate *control.Candidate
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
// the files (checkReload), force taking files the reload guard rolled
// back. A refusal ends the reload at once (finishReload: READY=1 with the
// reason in STATUS=, or STATUS= alone when nested: another reload, whose
// files were good, is still under way).
func (s *supervisor) prepareReload(nested, force bool) (*reloadPlan, control.ReloadResult) {
	start := time.Now()
	if !nested {
		s.notify.Reloading(s.reloadingStatus())
		s.notify.ExtendTimeout(s.config().ReloadBound(0))
	}
	p, tried, err := s.checkReload(planInput{force: force})
	if err == nil {
		return p, control.ReloadResult{}
	}
	return nil, s.finishReload(reloadqueue.Run{Start: start}, nil, 0, refusal(s.proxy.Epoch(), err), err, nested, tried)
}

// refusal is the answer of a reload refused with err while epoch serves.
func refusal(epoch int, err error) control.ReloadResult {
	return control.ReloadResult{Epoch: epoch, Error: err.Error(),
		Config: errors.As(err, new(errConfig)) || errors.As(err, new(*config.ConfigError))}
}

// checkReload re-reads the TOML, refuses keys a reload cannot change,
// copies the bootstrap and validates that copy while the binary's
// hot-restart version is asked (from the cache when it has not changed),
// refuses files the reload guard rolled back (unless in.force), decides
// the path from that version and the serving Envoy's (reloadPath), and,
// with reload_method "auto", whether the serving epoch can take the change
// in place. It returns the whole plan, and the files it read as far as it
// read them (a refusal's, for the status).
func (s *supervisor) checkReload(in planInput) (*reloadPlan, servedFiles, error) {
	t := time.Now()
	old := s.config()
	var tried servedFiles
	cfg, err := s.planConfig(old, in)
	if err != nil {
		return nil, tried, err
	}
	tried.config = cfg.Sum()
	if in.candidate != nil {
		tried.config = in.candidate.ConfigSHA256
	}
	if keys := config.RestartOnlyChanges(old, cfg); len(keys) > 0 {
		return nil, tried, errConfig{fmt.Errorf("a reload cannot change %s: restart the service to apply it", strings.Join(keys, ", "))}
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
		if in.candidate != nil { // the client asked its binary: the agent runs none a client names
			hr <- answer{version: in.candidate.HotRestartVersion}
			return
		}
		t := time.Now()
		v, err := s.envoys.HotRestartVersion(ctx, cfg.Envoy.BinaryPath)
		hr <- answer{v, err, time.Since(t)}
	}()
	// One copy of the bootstrap: planned, validated, then run. Reading the
	// file twice would validate one text and run another if it changed in
	// between.
	var copied, why string
	var inPlace *epochfiles.Plan
	if in.dry {
		copied, tried.bootstrap, err = s.copyForPlan(ctx, cfg, in, &p.steps)
	} else {
		copied, tried.bootstrap, inPlace, why, err = s.copyAndValidate(ctx, old, cfg, &p.steps)
	}
	if err != nil {
		<-hr
		return nil, tried, err
	}
	v := <-hr
	if rb, ok := s.report.wasRolledBack(tried); ok && !in.force {
		_ = os.Remove(copied)
		return nil, tried, errConfig{fmt.Errorf("these files (%s and %s) were rolled back by the reload guard at %s: %s; fix them, or take them again with envoy-agent reload --force",
			cfg.File, cfg.Envoy.ConfigPath, rb.files.at.UTC().Format(time.RFC3339), rb.reason)}
	}
	p.files = tried
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
		return nil, tried, err
	}
	p.version = v.version
	p.envoy = envoy.ReloadPlan{Path: path, Config: s.proxyConfig(cfg, v.version), Copied: copied}
	if path == envoy.DrainRestart {
		p.envoy.Restart = s.restartPlan(cfg, p.fromPid)
	}
	if in.dry && cfg.Agent.InPlace() {
		// A dry run's copy was validated whole; its plan is made now.
		t := time.Now()
		inPlace, why = s.planInPlace(old, cfg, &epochfiles.Copy{Path: copied})
		p.steps.plan = time.Since(t)
	}
	p.why = why
	// Without hot restart, the other path closes every connection at once.
	if inPlace != nil && path != envoy.DrainRestart {
		if cuts := cutsRequests(inPlace.Change.Listeners, cfg); cuts != "" {
			// The plan's copy is the reload's copy, which the hot restart
			// runs: validated whole (a dry run's was already).
			inPlace, p.why = nil, cuts
			if !in.dry {
				t := time.Now()
				err = s.validateCopy(ctx, cfg, copied)
				p.steps.validate += time.Since(t)
				if err != nil {
					_ = os.Remove(copied)
					return nil, tried, err
				}
			}
		}
	}
	if inPlace != nil {
		p.envoy.Path, p.envoy.InPlace = envoy.InPlace, inPlace
	}
	p.envoy.Timeout = reloadTimeout(cfg, p.envoy.Path)
	return p, tried, nil
}

// planConfig is the configuration a plan takes: the agent's file read
// again, or a candidate's as its client loaded it.
func (s *supervisor) planConfig(old *config.Config, in planInput) (*config.Config, error) {
	if in.candidate == nil {
		return config.LoadConfig(old.File)
	}
	// Planned as the files the agent runs: the candidate's copies are to
	// replace them (the Ansible role writes and checks them elsewhere).
	c := *in.candidate.Config
	c.File, c.Envoy.ConfigPath = old.File, old.Envoy.ConfigPath
	return &c, nil
}

// copyForPlan is copyAndValidate for a plan that will not run: the
// bootstrap's bytes (the file cfg names, or a candidate's) copied through
// the certificates' rewrite that serves and watches nothing
// (certs.Rewrite), and validated unless a candidate's client validated
// them. It returns the copy and the SHA-256 of the bytes.
func (s *supervisor) copyForPlan(ctx context.Context, cfg *config.Config, in planInput, steps *reloadSteps) (string, string, error) {
	t := time.Now()
	data := []byte(nil)
	if in.candidate != nil {
		data = in.candidate.Bootstrap
	} else {
		var err error
		if data, err = safefile.ReadRegular(cfg.Envoy.ConfigPath, epochfiles.MaxBootstrapSize); err != nil {
			return "", "", errConfig{fmt.Errorf("envoy.config_path: read envoy bootstrap: %w", err)}
		}
	}
	sum := sha256.Sum256(data)
	copied, err := s.proxy.CopyForPlan(data, cfg.Envoy.ConfigPath, func(doc *yaml.Node, runDir string) (bool, error) {
		// The certificates' step without serving or watching them.
		r, err := certs.Edit(doc, runDir)
		return len(r.Secrets) > 0, err
	})
	steps.copy = time.Since(t)
	if err != nil {
		return "", hex.EncodeToString(sum[:]), errConfig{fmt.Errorf("envoy.config_path: %w", err)}
	}
	if in.candidate == nil {
		t = time.Now()
		err = s.validateCopy(ctx, cfg, copied)
		steps.validate = time.Since(t)
		if err != nil {
			_ = os.Remove(copied)
			return "", hex.EncodeToString(sum[:]), err
		}
	}
	return copied, hex.EncodeToString(sum[:]), nil
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

// copyAndValidate copies cfg's bootstrap, plans the change in place from
// old's when cfg reloads in place (planInPlace: the plan, or why a new
// epoch is needed), and validates what the plan says (Plan.Validate: the
// resources the change touches), else the whole copy; and then it checks
// that the file still holds what was copied: a reload that read a file a
// writer had cut short (truncated, not yet written whole) would otherwise
// run whatever prefix of it validates, which can be a bootstrap with no
// routes, no endpoints or no listeners. When the file changed, it is read
// again, bootstrapReads times at most; then the reload is refused. It
// returns the copy and the SHA-256 of the bytes it was made of (known too
// when the copy is refused, for the status).
func (s *supervisor) copyAndValidate(ctx context.Context, old, cfg *config.Config, steps *reloadSteps) (copied, sum string, inPlace *epochfiles.Plan, why string, err error) {
	for read := 1; ; read++ {
		t := time.Now()
		c, err := s.proxy.CopyBootstrap(cfg.Envoy.ConfigPath)
		steps.copy += time.Since(t)
		if err != nil {
			return "", "", nil, "", errConfig{fmt.Errorf("envoy.config_path: %w", err)}
		}
		if cfg.Agent.InPlace() {
			t = time.Now()
			inPlace, why = s.planInPlace(old, cfg, c)
			steps.plan += time.Since(t)
		}
		t = time.Now()
		if inPlace != nil {
			err = inPlace.Validate(func(path string) error { return s.validateCopy(ctx, cfg, path) })
		} else {
			err = s.validateCopy(ctx, cfg, c.Path)
		}
		steps.validate += time.Since(t)
		// Whether it validated or not: a torn copy's errors are not the
		// file's.
		if changed := c.SourceUnchanged(); changed != nil {
			_ = os.Remove(c.Path)
			if errors.Is(changed, epochfiles.ErrBootstrapChanged) && read < bootstrapReads {
				s.log.Warnf("reload: %v; reading it again", changed)
				continue
			}
			return "", "", nil, "", errConfig{fmt.Errorf("envoy.config_path: %w, %d times in a row: write the new bootstrap to a file beside it and rename that over it (mv), then reload", changed, read)}
		}
		if err != nil {
			_ = os.Remove(c.Path)
			return "", c.SHA256(), nil, "", err
		}
		return c.Path, c.SHA256(), inPlace, why, nil
	}
}

// validateCopy runs `envoy --mode validate` on copied, the private copy of
// cfg's bootstrap that the new epoch will run (or the part of it a plan in
// place validates); problems name the operator's file, not the copy.
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
// is c, or nil and why a new epoch is needed: the command line or the
// binary changed, or the bootstrap outside its listeners, routes, clusters
// and moved secrets (a listener changed beside its routes is the caller's
// to judge: cutsRequests).
func (s *supervisor) planInPlace(old, cfg *config.Config, c *epochfiles.Copy) (*epochfiles.Plan, string) {
	// With the serving binary's version on both sides: whether the binary
	// changed is the next question.
	serving := s.hotRestartVersion()
	if !envoy.SameCommandLine(s.proxyConfig(old, serving), s.proxyConfig(cfg, serving)) {
		return nil, "Envoy's command line changes"
	}
	if !s.proxy.ServingBinaryIs(cfg.Envoy.BinaryPath) {
		return nil, "the Envoy binary changed (or the serving Envoy was adopted in a live upgrade)"
	}
	plan, err := s.proxy.PlanInPlace(c)
	if err != nil {
		var restart *inplace.RestartError
		if errors.As(err, &restart) {
			return nil, restart.Reason
		}
		return nil, err.Error()
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
// With the reload guard on, a reload that takes a new configuration is
// watched from its end (guardReload).
func (s *supervisor) applyReload(p *reloadPlan, run reloadqueue.Run) control.ReloadResult {
	prev := s.current()
	g := s.prepareGuard(p, prev, run.Start)
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
		files := p.files
		files.at = time.Now()
		s.takeReloadedConfig(p.cfg, p.version, files)
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
	s.guardReload(g, p, prev, err, &res)
	return s.finishReload(run, p, applied, res, err, false, p.files)
}

// finishReload is the one ending of a reload, refused before it had a plan
// (p nil), failed or done: the answer's time (from run's start, its wait
// included), the metrics, the status report (with tried, the files it
// read), the log line (with each step's time, applied the plan's call),
// and READY=1 with STATUS= (STATUS= alone when nested: a refusal while
// another reload, whose files were good, is under way).
func (s *supervisor) finishReload(run reloadqueue.Run, p *reloadPlan, applied time.Duration, res control.ReloadResult, err error, nested bool, tried servedFiles) control.ReloadResult {
	took := time.Since(run.Start)
	res.TookMs = took.Milliseconds()
	if err != nil {
		res.Outcome = control.OutcomeFailed
	}
	path := envoy.HotRestart
	if p != nil {
		path = p.envoy.Path
	}
	s.metrics.epoch.Set(float64(s.proxy.Epoch()))
	s.metrics.reloadSeconds.Set(took.Seconds())
	s.report.reloadDone(run.Start, res, s.triedFiles(tried))
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
	guarded := ""
	if res.Outcome == control.OutcomeGuarding {
		log = log.WithField("guard_ends", res.GuardEnds)
		guarded = "; the reload guard watches it until " + res.GuardEnds
	}
	if path == envoy.InPlace {
		s.metrics.reloadsInPlace.Inc()
		log.WithFields(logrus.Fields{"path": res.Path, "changed": res.Changed}).Infof("reloaded in place in %s: %s; epoch %d keeps serving", took.Round(time.Millisecond), res.Changed, res.Epoch)
		s.notify.Ready(fmt.Sprintf("%s; reloaded in place %s%s", s.liveStatus(), time.Now().Format(time.RFC3339), guarded))
		return res
	}
	s.metrics.reloads.Inc()
	if res.Path != "" {
		log = log.WithFields(logrus.Fields{"path": res.Path, "why": res.Changed})
	}
	log.Infof("reloaded in %s: epoch %d is serving", took.Round(time.Millisecond), res.Epoch)
	s.notify.Ready(fmt.Sprintf("%s; reloaded %s%s", s.liveStatus(), time.Now().Format(time.RFC3339), guarded))
	return res
}

// triedFiles is tried with what it does not know read from the files now:
// a reload refused before it read them (the TOML did not load, say) read
// them all the same a moment ago.
func (s *supervisor) triedFiles(tried servedFiles) servedFiles {
	cfg := s.config()
	if tried.config == "" {
		tried.config, _ = config.FileSum(cfg.File)
	}
	if tried.bootstrap == "" {
		tried.bootstrap, _ = bootstrapSum(cfg.Envoy.ConfigPath)
	}
	return tried
}

// takeReloadedConfig makes cfg, now running in an Envoy of hot-restart
// version version, the agent's configuration, read from files: drain
// settings, log settings, and what the next reload compares with.
func (s *supervisor) takeReloadedConfig(cfg *config.Config, version string, files servedFiles) {
	s.takeSettings(cfg)
	s.reloaded(cfg, version, files)
}

// takeSettings takes cfg's drain and log settings.
func (s *supervisor) takeSettings(cfg *config.Config) {
	a := cfg.Agent
	s.runner.SetDrainSettings(a.TerminationDrainDuration.D(), a.MinDrainDuration.D(), a.ExitOnZeroActiveConnections)
	s.applyLogSettings(cfg)
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
// when not nil, hears at once what the reload waits for. opts.Force takes
// files the reload guard rolled back; opts.Wait holds the answer until the
// guard's verdict (awaitGuard).
func (s *supervisor) requestReload(ctx context.Context, progress func(string), opts control.ReloadOptions) control.ReloadResult {
	if !s.live() {
		res := control.ReloadResult{Error: "envoy is not serving (starting or stopping): nothing to reload", Epoch: s.proxy.Epoch()}
		s.log.Warnf("reload refused: %s", res.Error)
		return res
	}
	var res control.ReloadResult
	select {
	case res = <-s.reloader.Request(progress, opts.Force):
	case <-ctx.Done():
		return control.ReloadResult{Error: "the reload request was cancelled; the reload goes on"}
	}
	if opts.Wait {
		res = s.awaitGuard(ctx, res, progress)
	}
	return res
}

// requestPlan is a dry run (`reload --dry-run`, candidate nil) or
// `validate --plan` (a candidate's files): what a reload would do, from
// the reload queue (so that it does not race a reload), changing nothing:
// no RELOADING=1, no phase step, no call to Envoy; its copy is removed.
func (s *supervisor) requestPlan(_ context.Context, candidate *control.Candidate, force bool) control.ReloadResult {
	if !s.live() {
		return control.ReloadResult{DryRun: true, Error: "envoy is not serving (starting or stopping): nothing to plan against", Epoch: s.proxy.Epoch()}
	}
	res := control.ReloadResult{DryRun: true, Error: "the agent is stopping", Epoch: s.proxy.Epoch()}
	s.reloader.Do(func(context.Context) { res = s.dryRun(candidate, force) })
	return res
}

// dryRun plans a reload as checkReload does, with a copy that serves and
// watches nothing, and says what it would do.
func (s *supervisor) dryRun(candidate *control.Candidate, force bool) control.ReloadResult {
	p, _, err := s.checkReload(planInput{dry: true, force: force, candidate: candidate})
	if err != nil {
		res := refusal(s.proxy.Epoch(), err)
		res.DryRun = true
		return res
	}
	defer os.Remove(p.envoy.Copied)
	rep := control.PlanReport{Path: p.envoy.Path.String(), Why: p.why, Epoch: p.from, Pid: p.fromPid}
	switch {
	case p.envoy.Path == envoy.DrainRestart && rep.Why == "":
		rep.Why = control.HotRestartOffNote
	case p.envoy.Path == envoy.HotRestart && rep.Why == "" && !p.cfg.Agent.InPlace():
		rep.Why = `agent.reload_method is "hot_restart"`
	}
	var change inplace.Change
	if p.envoy.InPlace != nil {
		change = p.envoy.InPlace.Change
	} else if change, err = s.proxy.DiffServing(p.envoy.Copied); err != nil {
		rep.ResourcesUnknown = err.Error()
	}
	of := func(d inplace.Delta) control.ResourceChanges {
		return control.ResourceChanges{Added: d.Added, Changed: d.Updated, Removed: d.Removed}
	}
	rep.Listeners, rep.Routes, rep.Clusters, rep.Secrets = of(change.Listeners), of(change.Routes), of(change.Clusters), of(change.Secrets)
	s.log.WithFields(logrus.Fields{"event": "plan", "path": rep.Path, "why": rep.Why}).Infof("plan (dry run, nothing changed): %s", p)
	return control.ReloadResult{OK: true, DryRun: true, Epoch: p.from, Path: rep.Path, Changed: change.String(), Plan: &rep}
}
