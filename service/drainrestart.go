//go:build linux

// An Envoy whose hot restart is compiled out (`envoy --hot-restart-version`
// says "disabled"): it runs with --disable-hot-restart, and a reload drains
// and restarts it instead of hot restarting it.

package service

import (
	"fmt"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/envoy-agent/envoy-agent/envoy"
	"github.com/envoy-agent/envoy-agent/service/config"
	"github.com/envoy-agent/envoy-agent/service/control"
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

// reloadingStatus is STATUS= with RELOADING=1.
func (s *supervisor) reloadingStatus() string {
	if s.hotRestartOff() {
		return fmt.Sprintf("reloading: validating, then draining Envoy pid %d and restarting it (%s)", s.proxy.Pid(), control.HotRestartOffNote)
	}
	from := s.proxy.Epoch()
	return fmt.Sprintf("reloading: epoch %d serving, starting epoch %d", from, from+1)
}

// restartPlan is how a reload to cfg drains and restarts the serving
// Envoy, pid: as a stop drains (at least min_drain_duration, then until no
// connection is left, at most termination_drain_duration), with STATUS=
// saying so and the metric of drains cut counting it; then each start
// within start_timeout.
func (s *supervisor) restartPlan(cfg *config.Config, pid int) envoy.RestartPlan {
	a := cfg.Agent
	return envoy.RestartPlan{MinDrain: a.MinDrainDuration.D(), MaxDrain: a.TerminationDrainDuration.D(), StartTimeout: a.StartTimeout.D(),
		Progress: func(p envoy.DrainProgress) {
			s.metrics.drainEnded(s.metrics.drainsIncompleteRestart, p)
			if !p.Done {
				s.notify.Status(fmt.Sprintf("reloading: draining Envoy pid %d before restarting it: %d active connections, at most %s left (%s)",
					pid, p.ActiveConnections, p.Remaining.Round(time.Second), control.HotRestartOffNote))
			}
		}}
}

// restartNote is, for a drain and restart that was carried out (out, err
// nil), the sentence for the reload's answer, logged too; "" otherwise.
func (s *supervisor) restartNote(p *reloadPlan, out envoy.ReloadOutcome, err error) string {
	if p.envoy.Path != envoy.DrainRestart || err != nil {
		return ""
	}
	note := fmt.Sprintf("%s: Envoy pid %d drained for %s, pid %d serves the new configuration", control.HotRestartOffNote, p.fromPid, out.Drained.Round(time.Millisecond), out.Pid)
	s.log.WithFields(logrus.Fields{"event": "reload_restart", "old_pid": p.fromPid, "pid": out.Pid, "drained_ms": out.Drained.Milliseconds()}).Infof("reload: %s", note)
	return note
}
