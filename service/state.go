//go:build linux

// The supervisor's shared state, with one owner: the configuration in
// force, where the supervisor is in its life (phase: a stop and its drain
// included, which nothing else records) and the serving Envoy's
// hot-restart version. Every goroutine that reads them (the health and
// status servers, the watchdog, the reloader, the stop, the upgrade) goes
// through state's methods; the transitions are the only way to change the
// phase, and each says from which phases it may be taken.

package service

import (
	"sync"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy"
	"github.com/envoy-agent/envoy-agent/service/config"
)

// phase is where the supervisor is in its life.
type phase int

const (
	// phaseStarting: Envoy is not LIVE yet.
	phaseStarting phase = iota
	// phaseLive: Envoy serves, nothing else is under way.
	phaseLive
	// phaseReloading: a reload changes the serving epoch in place, or
	// starts a new epoch by hot restart; the serving epoch keeps serving,
	// and in a hot restart the admin API may be the new epoch's before it
	// is LIVE.
	phaseReloading
	// phaseDrainRestarting: a reload drains and restarts an Envoy without
	// hot restart; nothing serves until the new one is LIVE.
	phaseDrainRestarting
	// phaseDown: a stop began (its drain, a drain with no end, a stop
	// without a drain), or the agent stopped; Envoy is not ready.
	phaseDown
)

// state is the supervisor's state that more than one goroutine reads.
type state struct {
	lock      sync.Mutex
	cfg       *config.Config
	files     servedFiles // cfg's files when it came into force (drift.go)
	phase     phase
	hrVersion string // the serving Envoy's hot-restart version
}

// inForce is what state keeps of the configuration in force: what a
// rollback puts back.
type inForce struct {
	cfg       *config.Config
	files     servedFiles
	hrVersion string
}

// newState is the state of a supervisor that starts with cfg.
func newState(cfg *config.Config) state {
	return state{cfg: cfg, files: filesOf(cfg, time.Now())}
}

func (st *state) config() *config.Config {
	st.lock.Lock()
	defer st.lock.Unlock()
	return st.cfg
}

// reloaded takes a reload's configuration and the hot-restart version of
// the Envoy that now serves it, together, with the files it was read from
// (their sums as the reload read them: the bootstrap's is its copy's).
func (st *state) reloaded(c *config.Config, hotRestartVersion string, files servedFiles) {
	st.lock.Lock()
	st.cfg, st.hrVersion, st.files = c, hotRestartVersion, files
	st.lock.Unlock()
}

// current is the configuration in force, for a rollback to put back.
func (st *state) current() inForce {
	st.lock.Lock()
	defer st.lock.Unlock()
	return inForce{cfg: st.cfg, files: st.files, hrVersion: st.hrVersion}
}

// putBack makes f, taken by current before a reload, the configuration in
// force again: a rollback, whose files are those of before (not the
// files on disk, which hold what was rolled back).
func (st *state) putBack(f inForce) {
	st.lock.Lock()
	st.cfg, st.files, st.hrVersion = f.cfg, f.files, f.hrVersion
	st.lock.Unlock()
}

// served is the configuration in force with its files when it came in.
func (st *state) served() (*config.Config, servedFiles) {
	st.lock.Lock()
	defer st.lock.Unlock()
	return st.cfg, st.files
}

func (st *state) hotRestartVersion() string {
	st.lock.Lock()
	defer st.lock.Unlock()
	return st.hrVersion
}

// setHotRestartVersion keeps the serving Envoy's hot-restart version, as
// it said at READY=1 or as a live upgrade handed it over.
func (st *state) setHotRestartVersion(v string) {
	st.lock.Lock()
	st.hrVersion = v
	st.lock.Unlock()
}

func (st *state) now() phase {
	st.lock.Lock()
	defer st.lock.Unlock()
	return st.phase
}

// move sets the phase to to when it is one of from; it reports whether it
// did.
func (st *state) move(to phase, from ...phase) bool {
	st.lock.Lock()
	defer st.lock.Unlock()
	for _, f := range from {
		if st.phase == f {
			st.phase = to
			return true
		}
	}
	return false
}

// wentLive: Envoy is first LIVE.
func (st *state) wentLive() bool { return st.move(phaseLive, phaseStarting) }

// beginReload: a reload by path begins, in one step: in place or by hot
// restart (phaseReloading), or by a drain and restart. Only a serving
// Envoy is reloaded.
func (st *state) beginReload(path envoy.ReloadPath) bool {
	to := phaseReloading
	if path == envoy.DrainRestart {
		to = phaseDrainRestarting
	}
	return st.move(to, phaseLive)
}

// endReload: the reload's epoch is LIVE, or it failed and the serving one
// still serves. A stop that came meanwhile keeps the supervisor down.
func (st *state) endReload() { st.move(phaseLive, phaseReloading, phaseDrainRestarting) }

// down: a stop, a drain with no end, or the end.
func (st *state) down() {
	st.lock.Lock()
	st.phase = phaseDown
	st.lock.Unlock()
}

// live is whether Envoy serves: LIVE, reloading included (its serving
// epoch serves throughout a hot restart; a drain and restart is a reload
// of a serving Envoy too, refused meanwhile by the one-at-a-time queue).
func (st *state) live() bool {
	switch st.now() {
	case phaseLive, phaseReloading, phaseDrainRestarting:
		return true
	}
	return false
}

// stopping is whether a stop has begun (or ended): the one record of it.
func (st *state) stopping() bool { return st.now() == phaseDown }

// reloading is whether a reload is under way.
func (st *state) reloading() bool {
	p := st.now()
	return p == phaseReloading || p == phaseDrainRestarting
}

// drainRestarting is whether a reload drains and restarts Envoy.
func (st *state) drainRestarting() bool { return st.now() == phaseDrainRestarting }
