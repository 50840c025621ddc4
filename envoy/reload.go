//go:build linux

package envoy

import (
	"context"
	"errors"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy/inplace"
)

// ReloadPath is how a reload reaches its new configuration.
type ReloadPath int

const (
	// HotRestart starts a new epoch by hot restart; the replaced one
	// drains until parent_shutdown_duration.
	HotRestart ReloadPath = iota
	// DrainRestart drains and stops the serving Envoy, then starts a new
	// one: the path where hot restart is compiled out.
	DrainRestart
	// InPlace changes the serving epoch through its resource files; no
	// process starts.
	InPlace
)

// String is the path's name as the agent's answers and logs give it.
func (p ReloadPath) String() string {
	switch p {
	case DrainRestart:
		return "drain_restart"
	case InPlace:
		return "in_place"
	}
	return "hot_restart"
}

// ReloadPlan is one reload as its caller decided it: the path, and what
// that path needs.
type ReloadPlan struct {
	Path ReloadPath
	// Config and Copied are the new epoch's settings and its validated
	// bootstrap copy (CopyBootstrap), for HotRestart and DrainRestart;
	// the epoch takes the copy, or it is removed.
	Config ProxyConfig
	Copied string
	// Restart bounds DrainRestart's drain and start.
	Restart RestartPlan
	// InPlace is PlanInPlace's plan, for InPlace.
	InPlace *InPlacePlan
}

// ReloadOutcome is what a reload did.
type ReloadOutcome struct {
	// Epoch and Pid are the epoch that serves afterwards and its process.
	Epoch, Pid int
	// Drained is how long DrainRestart's drain of the old Envoy took.
	Drained time.Duration
	// Change is what InPlace changed.
	Change inplace.Change
}

// Reload carries out plan (HotRestartFrom, DrainAndRestartFrom or
// ApplyInPlace) and returns what happened; on an error the serving
// configuration is the one before, as each path says.
func (e *Envoy) Reload(ctx context.Context, plan ReloadPlan) (ReloadOutcome, error) {
	var out ReloadOutcome
	var err error
	switch plan.Path {
	case InPlace:
		if plan.InPlace == nil {
			return out, errors.New("reload in place: no plan")
		}
		out.Change = plan.InPlace.Change
		err = e.ApplyInPlace(ctx, plan.InPlace)
	case DrainRestart:
		_, out.Drained, err = e.DrainAndRestartFrom(ctx, plan.Config, plan.Copied, plan.Restart)
	default:
		_, err = e.HotRestartFrom(ctx, plan.Config, plan.Copied)
	}
	out.Epoch, out.Pid = e.Epoch(), e.Pid()
	return out, err
}
