//go:build linux

package envoy

import (
	"slices"
	"time"
)

// Roles an epoch can have, as Epochs reports them.
const (
	RoleServing  = "serving"  // owns the admin API and takes new connections
	RoleDraining = "draining" // replaced by a newer epoch; drains until it is told to exit
	RoleStarting = "starting" // a hot restart's new epoch, not LIVE yet
)

// EpochInfo is one Envoy process of the hot-restart chain that is not yet
// reaped.
type EpochInfo struct {
	Epoch   int
	Pid     int
	Started time.Time
	Role    string    // RoleServing, RoleDraining or RoleStarting
	Since   time.Time // for RoleDraining: when the next epoch took over
}

// Epochs lists the Envoy processes that are running, newest epoch first.
func (e *Envoy) Epochs() []EpochInfo {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]EpochInfo, 0, len(e.procs))
	for p := range e.procs {
		if p.exited() {
			continue
		}
		info := EpochInfo{Epoch: p.epoch, Pid: p.pid, Started: p.started, Role: RoleStarting}
		switch {
		case p == e.cur:
			info.Role = RoleServing
		case !p.replaced.IsZero():
			info.Role, info.Since = RoleDraining, p.replaced
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b EpochInfo) int {
		if a.Epoch != b.Epoch {
			return b.Epoch - a.Epoch
		}
		return b.Started.Compare(a.Started)
	})
	return out
}

// Timings returns the drain time and parent shutdown time the serving
// configuration gives a replaced epoch.
func (e *Envoy) Timings() (drain, parentShutdown time.Duration) {
	cfg := e.config()
	return durationOr(cfg.DrainDuration, DefaultDrainDuration), durationOr(cfg.ParentShutdownDuration, DefaultParentShutdownDuration)
}
