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
	phase     phase
	hrVersion string // the serving Envoy's hot-restart version
}

func (st *state) config() *config.Config {
	st.lock.Lock()
	defer st.lock.Unlock()
	return st.cfg
}

// reloaded takes a reload's configuration and the hot-restart version of
// the Envoy that now serves it, together.
func (st *state) reloaded(c *config.Config, hotRestartVersion string) {
	st.lock.Lock()
	st.cfg, st.hrVersion = c, hotRestartVersion
	st.lock.Unlock()
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
