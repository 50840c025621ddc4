//go:build linux

// Health: what /healthz/ready answers, what feeds the watchdog, and the
// live state both read.

package service

import (
	"context"
	"fmt"
	"strings"

	"github.com/envoy-agent/envoy-agent/service/control"
)

// goLive: Envoy is first LIVE.
func (s *supervisor) goLive() {
	s.wentLive()
	s.metrics.live.Set(1)
	s.metrics.epoch.Set(float64(s.proxy.Epoch()))
}

// goDown: a stop, a drain with no end, or the end; Envoy is not ready
// from now on.
func (s *supervisor) goDown() {
	s.down()
	s.metrics.live.Set(0)
	s.metrics.epoch.Set(float64(s.proxy.Epoch()))
}

func (s *supervisor) liveStatus() string {
	cfg := s.config()
	status := fmt.Sprintf("live: Envoy pid %d, epoch %d, admin %s", s.proxy.Pid(), s.proxy.Epoch(), cfg.AdminAddress())
	if s.hotRestartOff() {
		status += "; " + control.HotRestartOffNote
	}
	if note := s.checkInstalledEnvoy(); note != "" {
		status += "; " + note
	}
	return status
}

// ready is /healthz/ready: Envoy answers LIVE and no stop has begun.
func (s *supervisor) ready(ctx context.Context) (bool, string) {
	if s.stopping() {
		return false, "draining"
	}
	r, err := s.admin.Ready(ctx)
	if err != nil {
		if s.drainRestarting() {
			return false, "restarting: " + control.HotRestartOffNote
		}
		if s.reloading() {
			// A hot restart's starting epoch takes the admin port over
			// early; the serving epoch keeps serving meanwhile.
			return true, "LIVE (reloading)"
		}
		return false, "envoy admin API not answering"
	}
	if !r.Live {
		return false, r.State
	}
	return true, r.State
}

// watchdogCheck is nil before Envoy is first LIVE (the agent itself is
// alive) and during a reload, and otherwise (a stop's drain included) only
// while Envoy's admin API answers; its error names what stopped answering.
func (s *supervisor) watchdogCheck(ctx context.Context) error {
	if s.now() == phaseStarting || s.reloading() {
		return nil // the start timeout bounds both
	}
	if _, err := s.admin.Ready(ctx); err != nil {
		return fmt.Errorf("the admin API of Envoy pid %d (epoch %d, %s) does not answer GET /ready: %w",
			s.proxy.Pid(), s.proxy.Epoch(), s.config().AdminAddress(), err)
	}
	return nil
}

func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}
