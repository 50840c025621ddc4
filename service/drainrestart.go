//go:build linux

// An Envoy whose hot restart is compiled out (`envoy --hot-restart-version`
// says "disabled"): it runs with --disable-hot-restart, and a reload drains
// and restarts it instead of hot restarting it.

package service

import (
	"context"
	"fmt"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy"
	"github.com/envoy-agent/envoy-agent/service/config"
	"github.com/envoy-agent/envoy-agent/service/control"
	"github.com/sirupsen/logrus"
)

// noteHotRestartOff says, once Envoy's /server_info has told the agent that
// hot restart is compiled out of it, how such an Envoy is run from now on:
// every later epoch with --disable-hot-restart (proxyConfig) and without
// the hot-restart arguments, and a reload as a drain and a restart. The
// first start is not delayed to ask the binary beforehand (a full Envoy
// process start, tens of milliseconds on every start of every Envoy): a
// build without hot restart ignores the hot-restart arguments of that first
// start, sets up no shared memory and binds no hot-restart socket.
func (s *supervisor) noteHotRestartOff(binary string) {
	s.log.WithFields(logrus.Fields{"event": "hot_restart_disabled", "binary": binary}).
		Warnf("%s says its hot-restart version is %q: %s; it runs with --disable-hot-restart from its next start on", binary, envoy.HotRestartDisabled, control.HotRestartOffNote)
	s.notify.Status(s.liveStatus())
}

// hotRestartOff reports whether the serving Envoy runs without hot restart.
func (s *supervisor) hotRestartOff() bool {
	return s.hotRestartVersion() == envoy.HotRestartDisabled
}

// restartsInstead reports whether a reload from the serving Envoy to the
// binary of hot-restart version next must drain and restart: when either
// has hot restart compiled out (an Envoy binary upgrade included).
func (s *supervisor) restartsInstead(next string) bool {
	return s.hotRestartOff() || next == envoy.HotRestartDisabled
}

// reloadingStatus is STATUS= with RELOADING=1.
func (s *supervisor) reloadingStatus() string {
	if s.hotRestartOff() {
		return fmt.Sprintf("reloading: validating, then draining Envoy pid %d and restarting it (%s)", s.proxy.Pid(), control.HotRestartOffNote)
	}
	from := s.proxy.Epoch()
	return fmt.Sprintf("reloading: epoch %d serving, starting epoch %d", from, from+1)
}

// drainAndRestart is the reload of an Envoy without hot restart, once cfg
// and its bootstrap copy are validated: the serving Envoy drains as in a
// stop (at least min_drain_duration, then until no connection is left, at
// most termination_drain_duration), is stopped, and a new Envoy runs cfg
// from the plan's copy, with --disable-hot-restart when next, the new
// binary's hot-restart version, says hot restart is compiled out. It
// returns the serving epoch and a sentence for the reload's answer; the
// caller takes cfg (takeReloadedConfig).
func (s *supervisor) drainAndRestart(cfg *config.Config, reload envoy.ReloadPlan, next string) (int, string, error) {
	a := cfg.Agent
	old := s.proxy.Pid()
	s.notify.ExtendTimeout(a.TerminationDrainDuration.D() + cfg.ReloadBound())
	s.beginReload(true) // nothing serves until the new Envoy is LIVE; applyReload ends it
	reload.Config = s.proxyConfig(cfg)
	reload.Config.DisableHotRestart = next == envoy.HotRestartDisabled
	reload.Restart = envoy.RestartPlan{MinDrain: a.MinDrainDuration.D(), MaxDrain: a.TerminationDrainDuration.D(), StartTimeout: a.StartTimeout.D(),
		Progress: func(p envoy.DrainProgress) {
			s.metrics.drainEnded(s.metrics.drainsIncompleteRestart, p)
			if !p.Done {
				s.notify.Status(fmt.Sprintf("reloading: draining Envoy pid %d before restarting it: %d active connections, at most %s left (%s)",
					old, p.ActiveConnections, p.Remaining.Round(time.Second), control.HotRestartOffNote))
			}
		}}
	out, err := s.proxy.Reload(context.Background(), reload)
	if err != nil {
		return 0, "", err
	}
	note := fmt.Sprintf("%s: Envoy pid %d drained for %s, pid %d serves the new configuration", control.HotRestartOffNote, old, out.Drained.Round(time.Millisecond), out.Pid)
	s.log.WithFields(logrus.Fields{"event": "reload_restart", "old_pid": old, "pid": out.Pid, "drained_ms": out.Drained.Milliseconds()}).Infof("reload: %s", note)
	return out.Epoch, note, nil
}
