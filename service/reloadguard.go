//go:build linux

// The reload guard's side of a reload: the window it watches after a
// reload that changed the configuration (package guardwatch judges it),
// the rollback by the reload's own path to the configuration from
// before, and the answer held until the verdict (reload --wait).

package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/envoy-agent/envoy-agent/envoy"
	"github.com/envoy-agent/envoy-agent/envoy/epochfiles"
	"github.com/envoy-agent/envoy-agent/service/control"
	"github.com/envoy-agent/envoy-agent/service/guardwatch"
)

// guardedReload is a reload the reload guard watches: what a rollback
// puts back and how, and the verdict for those who wait for it.
type guardedReload struct {
	id    uint64
	prev  inForce          // the configuration before: what a rollback puts back
	files servedFiles      // the reload's files: what a rollback marks rolled back
	path  envoy.ReloadPath // how the reload went: in place, a rollback goes back in place
	kept  string           // a private copy of prev's bootstrap copy, which the rollback runs
	began time.Time        // when the reload began (its ReloadStatus.At)
	win   *guardwatch.Window

	done  chan struct{}        // closed once final is set
	final control.ReloadResult // what `reload --wait` adds to the answer: Outcome, Guard, Rollback, Epoch
}

// guards are the reload guard's watches of reloads: the one open, and the
// last few that ended, for a `reload --wait` that asks after the verdict.
type guards struct {
	mu      sync.Mutex
	next    uint64
	current *guardedReload
	recent  []*guardedReload
}

// maxRecentGuards bounds the ended watches kept for `reload --wait`: a
// caller asks for its own at once, and coalesced callers share one.
const maxRecentGuards = 8

// add registers a new watch, the current one.
func (gs *guards) add(g *guardedReload) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	gs.next++
	g.id = gs.next
	gs.current = g
	gs.recent = append(gs.recent, g)
	if n := len(gs.recent); n > maxRecentGuards {
		gs.recent = gs.recent[n-maxRecentGuards:]
	}
}

// take makes g no longer current and reports whether it was.
func (gs *guards) take(g *guardedReload) bool {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if gs.current != g {
		return false
	}
	gs.current = nil
	return true
}

// byID is the watch of that id among the current and recent ones.
func (gs *guards) byID(id uint64) *guardedReload {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	for _, g := range gs.recent {
		if g.id == id {
			return g
		}
	}
	return nil
}

// newConfiguration reports whether p takes another configuration than
// prev: other bytes in the TOML or the bootstrap (unknown after a live
// upgrade counts as other), and not an in-place change of nothing.
func newConfiguration(p *reloadPlan, prev inForce) bool {
	if p.envoy.Path == envoy.InPlace && p.envoy.InPlace != nil && p.envoy.InPlace.Change.Empty() {
		return false
	}
	return prev.files.config == "" || p.files.config != prev.files.config || p.files.bootstrap != prev.files.bootstrap
}

// prepareGuard readies the watch of p, a reload begun at began, when the
// reload guard is on for it and it takes a new configuration: a private
// copy of the serving bootstrap (what a rollback runs) and the watch's
// hold on its reads. nil when p is not to be watched.
func (s *supervisor) prepareGuard(p *reloadPlan, prev inForce, began time.Time) *guardedReload {
	if p.cfg.Agent.ReloadGuard <= 0 || !newConfiguration(p, prev) {
		return nil
	}
	kept, err := s.proxy.KeepServingCopy()
	if err != nil {
		s.log.Warnf("reload guard: cannot keep the serving configuration for a rollback (%v): this reload is not watched", err)
		return nil
	}
	s.watch.Hold()
	return &guardedReload{prev: prev, files: p.files, path: p.envoy.Path, kept: kept, began: began, done: make(chan struct{})}
}

// guardReload, once p was carried out (err nil) or failed, opens g's
// window, or lets go of g; a reload that took a new configuration unwatched
// ends the window of the one before (superseded). It sets the answer's
// outcome.
func (s *supervisor) guardReload(g *guardedReload, p *reloadPlan, prev inForce, err error, res *control.ReloadResult) {
	if err != nil {
		res.Outcome = control.OutcomeFailed
		if g != nil {
			s.watch.Release()
			_ = os.Remove(g.kept)
		}
		return
	}
	res.Outcome = control.OutcomeOK
	if g == nil {
		if newConfiguration(p, prev) {
			s.watch.Close(nil, guardwatch.Superseded)
		}
		return
	}
	a := p.cfg.Agent
	g.win = s.watch.Open(a.GuardThresholds(), time.Now(), a.ReloadGuard.D())
	s.guards.add(g)
	res.Outcome, res.GuardEnds, res.GuardWindow = control.OutcomeGuarding, g.win.Ends().UTC().Format(time.RFC3339Nano), g.id
	res.Guard = "watches Envoy's traffic until " + res.GuardEnds
	go s.judgeReload(g)
}

// judgeReload waits for g's verdict and acts on it: a regression is
// rolled back (rollback, from the reload queue: not beside a reload); a
// window that ended keeps the reload.
func (s *supervisor) judgeReload(g *guardedReload) {
	v := <-g.win.Verdict()
	log := s.log.WithFields(logrus.Fields{"event": "reload_guard", "reload": g.began.UTC().Format(time.RFC3339Nano)})
	switch v.Outcome {
	case guardwatch.Regressed:
		log.WithField("reason", v.Reason()).Warnf("reload guard: the reload of %s made Envoy's traffic worse: %s; rolling it back", g.began.UTC().Format(time.RFC3339), v.Reason())
		if !s.reloader.Do(func(ctx context.Context) { s.rollback(ctx, g, v) }) {
			_ = os.Remove(g.kept)
			s.guards.take(g)
			s.endGuard(g, control.ReloadResult{Outcome: control.OutcomeRolledBack, Epoch: s.proxy.Epoch(),
				Rollback: rollbackStatus(v, g.path, 0, errors.New("the agent is stopping: not rolled back"))})
		}
		return
	case guardwatch.Kept:
		log.Infof("reload guard: the reload of %s is kept: %s", g.began.UTC().Format(time.RFC3339), v.Summary)
		s.endGuard(g, control.ReloadResult{Outcome: control.OutcomeOK, Guard: v.Summary})
	case guardwatch.Superseded:
		s.endGuard(g, control.ReloadResult{Outcome: control.OutcomeOK, Guard: "not judged: a later reload took another configuration before the verdict"})
	default:
		s.endGuard(g, control.ReloadResult{Outcome: control.OutcomeOK, Guard: "not judged: the agent stopped watching (a stop, or a live upgrade of the agent)"})
	}
	s.guards.take(g)
	_ = os.Remove(g.kept)
}

// endGuard gives g's waiters its verdict, and the status report too when
// the reload was kept (a rollback records its own).
func (s *supervisor) endGuard(g *guardedReload, final control.ReloadResult) {
	if final.Rollback == nil {
		s.report.guardEnded(g.id, nil, 0)
	}
	g.final = final
	close(g.done)
}

// rollbackStatus is a rollback by path, of the regression v, that took
// took from the verdict (err: it failed).
func rollbackStatus(v guardwatch.Verdict, path envoy.ReloadPath, took time.Duration, err error) *control.RollbackStatus {
	rb := &control.RollbackStatus{At: v.At.UTC().Format(time.RFC3339Nano), Reason: v.Reason(), Path: path.String(), TookMs: took.Milliseconds(),
		Findings: []control.GuardFinding{}}
	for _, f := range v.Findings {
		rb.Findings = append(rb.Findings, control.GuardFinding{Signal: string(f.Signal), Subject: f.Subject, Before: f.Before, After: f.After})
	}
	if err != nil {
		rb.Error = err.Error()
	}
	return rb
}

// rollback puts back the configuration before g's reload, after the
// regression v: in place when the reload was in place, else by a hot
// restart (once the epoch the reload replaced has drained: no request in
// flight fails because of the rollback) or, where hot restart is compiled
// out, a drain and restart, to g's kept copy. A reload that came since
// (g is no longer current) is left alone. Then the configuration before
// is the agent's again, with its drain and log settings; the rollback is
// counted, reported, logged at warning and said in STATUS=, and g's files
// are remembered as rolled back. The files on disk are not touched.
func (s *supervisor) rollback(ctx context.Context, g *guardedReload, v guardwatch.Verdict) {
	if !s.guards.take(g) {
		_ = os.Remove(g.kept)
		s.endGuard(g, control.ReloadResult{Outcome: control.OutcomeOK, Guard: "not rolled back: a later reload took another configuration before the rollback"})
		return
	}
	plan, err := s.rollbackPlan(ctx, g)
	if err == nil && !s.beginReload(plan.Path) {
		err = errors.New("the agent is stopping")
	}
	if err != nil {
		_ = os.Remove(g.kept)
	} else {
		s.notify.Status(fmt.Sprintf("%s; rolling back the reload of %s: %s", s.liveStatus(), g.began.UTC().Format(time.RFC3339), v.Reason()))
		_, err = s.proxy.Reload(context.Background(), plan)
		s.endReload()
	}
	took := time.Since(v.At)
	rb := rollbackStatus(v, plan.Path, took, err)
	epoch := s.proxy.Epoch()
	f := logrus.Fields{"event": "reload_rollback", "path": plan.Path.String(), "took_ms": took.Milliseconds(), "epoch": epoch, "pid": s.proxy.Pid(),
		"reload": g.began.UTC().Format(time.RFC3339Nano)}
	if len(v.Findings) > 0 {
		first := v.Findings[0]
		f["signal"], f["subject"], f["before"], f["after"] = string(first.Signal), first.Subject, first.Before, first.After
	}
	var all []string
	for _, fd := range v.Findings {
		all = append(all, fmt.Sprintf("%s (%s)", fd.Signal, fd))
	}
	if err != nil {
		s.report.guardEnded(g.id, rb, epoch)
		s.log.WithFields(f).WithField("reason", firstLine(err.Error())).Errorf("reload guard: the rollback of the reload of %s FAILED after %s: %v; the reloaded configuration serves (epoch %d). Regression: %s",
			g.began.UTC().Format(time.RFC3339), took.Round(time.Millisecond), err, epoch, strings.Join(all, "; "))
		s.notify.Status(fmt.Sprintf("%s; the reload guard saw a regression and its rollback FAILED: %s", s.liveStatus(), firstLine(err.Error())))
		s.endGuard(g, control.ReloadResult{Outcome: control.OutcomeRolledBack, Epoch: epoch, Rollback: rb})
		return
	}
	s.takeSettings(g.prev.cfg)
	s.putBack(g.prev)
	s.metrics.reloadRollbacks.Inc()
	s.metrics.epoch.Set(float64(epoch))
	s.report.rememberRolledBack(g.files, v.At, v.Reason())
	s.report.guardEnded(g.id, rb, epoch)
	s.log.WithFields(f).Warnf("reload guard: rolled back the reload of %s (%s in %s): epoch %d serves the configuration from before; the files on disk are not what it serves (a reload of them is refused unless forced). Regression: %s",
		g.began.UTC().Format(time.RFC3339), strings.ReplaceAll(plan.Path.String(), "_", " "), took.Round(time.Millisecond), epoch, strings.Join(all, "; "))
	s.notify.Status(fmt.Sprintf("%s; last reload ROLLED BACK by the reload guard %s: %s", s.liveStatus(), time.Now().Format(time.RFC3339), v.Reason()))
	s.endGuard(g, control.ReloadResult{Outcome: control.OutcomeRolledBack, Epoch: epoch, Rollback: rb})
}

// rollbackPlan is the way back from g's reload to the configuration
// before it, to g's kept copy: in place when the reload was in place and
// the serving epoch can take it so; else a new epoch by the path the
// serving Envoy and the one before can take (reloadPath), after the wait
// for a draining epoch that a hot restart needs (ctx ends it at a stop).
func (s *supervisor) rollbackPlan(ctx context.Context, g *guardedReload) (envoy.ReloadPlan, error) {
	prev := g.prev
	if g.path == envoy.InPlace {
		ip, err := s.proxy.PlanInPlace(&epochfiles.Copy{Path: g.kept})
		if err == nil {
			return envoy.ReloadPlan{Path: envoy.InPlace, InPlace: ip, Copied: g.kept, Timeout: reloadTimeout(prev.cfg, envoy.InPlace)}, nil
		}
		s.log.Warnf("reload guard: the configuration before cannot be put back in place (%v): rolling back by a new epoch", err)
	}
	path, err := reloadPath(s.hotRestartVersion(), prev.hrVersion)
	plan := envoy.ReloadPlan{Path: path, Config: s.proxyConfig(prev.cfg, prev.hrVersion), Copied: g.kept, Timeout: reloadTimeout(prev.cfg, path)}
	if err != nil {
		return plan, fmt.Errorf("the Envoy before had hot-restart version %s, the serving one %s: %w", prev.hrVersion, s.hotRestartVersion(), err)
	}
	switch path {
	case envoy.DrainRestart:
		plan.Restart = s.restartPlan(prev.cfg, s.proxy.Pid())
	case envoy.HotRestart:
		if _, _, err := s.waitForDrainingEpochs(ctx, nil); err != nil {
			return plan, err
		}
	}
	return plan, nil
}

// stopGuard ends the reload guard's watch of the reload it watches, if
// any (Stopped), and waits, at most start_timeout, until its verdict was
// acted on (its kept copy removed, a rollback under way ended).
func (s *supervisor) stopGuard() {
	s.guards.mu.Lock()
	g := s.guards.current
	s.guards.mu.Unlock()
	s.watch.Close(nil, guardwatch.Stopped)
	if g == nil {
		return
	}
	t := time.NewTimer(s.config().Agent.StartTimeout.D())
	defer t.Stop()
	select {
	case <-g.done:
	case <-t.C:
	}
}

// awaitGuard holds a reload's answer res until the reload guard's verdict
// on it (`reload --wait`), saying first to progress until when it
// watches; the answer then carries the verdict. A reload not watched is
// answered at once. ctx ending (the client gone) ends the wait.
func (s *supervisor) awaitGuard(ctx context.Context, res control.ReloadResult, progress func(string)) control.ReloadResult {
	if !res.OK || res.GuardWindow == 0 {
		return res
	}
	g := s.guards.byID(res.GuardWindow)
	if g == nil {
		return res
	}
	if progress != nil {
		progress(fmt.Sprintf("reloaded (epoch %d); the reload guard watches Envoy's traffic until %s", res.Epoch, res.GuardEnds))
	}
	select {
	case <-g.done:
	case <-ctx.Done():
		return res
	}
	res.Outcome, res.Guard, res.Rollback, res.GuardEnds = g.final.Outcome, g.final.Guard, g.final.Rollback, ""
	if g.final.Rollback != nil {
		res.Epoch = g.final.Epoch
	}
	return res
}
