//go:build linux

package service

import (
	"testing"

	"github.com/envoy-agent/envoy-agent/envoy"
)

// Each transition moves only from the phases it names; a reload that ends
// after a stop began leaves the supervisor down.
func TestStateTransitions(t *testing.T) {
	for _, tc := range []struct {
		name            string
		from            phase
		move            func(*state) bool
		want            phase
		live, reloading bool
	}{
		{"first LIVE", phaseStarting, (*state).wentLive, phaseLive, true, false},
		{"LIVE again after a stop", phaseDown, (*state).wentLive, phaseDown, false, false},
		{"hot restart", phaseLive, func(st *state) bool { return st.beginReload(envoy.HotRestart) }, phaseReloading, true, true},
		{"in place", phaseLive, func(st *state) bool { return st.beginReload(envoy.InPlace) }, phaseReloading, true, true},
		{"hot restart before LIVE", phaseStarting, func(st *state) bool { return st.beginReload(envoy.HotRestart) }, phaseStarting, false, false},
		{"drain and restart", phaseLive, func(st *state) bool { return st.beginReload(envoy.DrainRestart) }, phaseDrainRestarting, true, true},
		{"a reload while one is under way", phaseReloading, func(st *state) bool { return st.beginReload(envoy.DrainRestart) }, phaseReloading, true, true},
		{"a reload after a stop began", phaseDown, func(st *state) bool { return st.beginReload(envoy.HotRestart) }, phaseDown, false, false},
		{"hot restart ends", phaseReloading, func(st *state) bool { st.endReload(); return true }, phaseLive, true, false},
		{"drain and restart ends", phaseDrainRestarting, func(st *state) bool { st.endReload(); return true }, phaseLive, true, false},
		{"reload ends after a stop", phaseDown, func(st *state) bool { st.endReload(); return false }, phaseDown, false, false},
		{"stop while reloading", phaseReloading, func(st *state) bool { st.down(); return true }, phaseDown, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &state{phase: tc.from}
			moved := tc.move(st)
			if got := st.now(); got != tc.want {
				t.Fatalf("phase %d, want %d", got, tc.want)
			}
			if moved != (tc.from != tc.want) {
				t.Errorf("the transition reported %v", moved)
			}
			if st.live() != tc.live || st.reloading() != tc.reloading {
				t.Errorf("live %v reloading %v, want %v %v", st.live(), st.reloading(), tc.live, tc.reloading)
			}
			if st.stopping() != (tc.want == phaseDown) {
				t.Errorf("stopping %v in phase %d", st.stopping(), tc.want)
			}
			if st.drainRestarting() != (tc.want == phaseDrainRestarting) {
				t.Errorf("drainRestarting %v in phase %d", st.drainRestarting(), tc.want)
			}
		})
	}
}
