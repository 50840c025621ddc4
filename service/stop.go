//go:build linux

// The systemd side of a stop and its drain (the drain itself is
// envoy/drain.go): STOPPING=1, the drain's STATUS= and EXTEND_TIMEOUT_USEC,
// the drain with no end, and the agent's last status.

package service

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/envoy-agent/envoy-agent/envoy"
	"github.com/envoy-agent/envoy-agent/service/control"
	"github.com/envoy-agent/envoy-agent/service/guardwatch"
	"github.com/envoy-agent/envoy-agent/service/lastexit"
)

// stop is a stop's beginning (SIGTERM): the reload under way is let end
// (start_timeout at most), the supervisor goes down, and the runner's
// context ends, which drains Envoy and stops it.
func (s *supervisor) stop(why string, stopEnvoy context.CancelFunc) {
	s.log.WithFields(logrus.Fields{"event": "stop", "reason": why}).Infof("%s", why)
	if s.reloading() {
		s.log.Infof("waiting for the reload under way to end before draining")
	}
	s.report.drainBegan("stop", s.config().Agent.TerminationDrainDuration.D())
	s.watch.Close(nil, guardwatch.Stopped) // a stop is never rolled back
	if limit := s.config().Agent.StartTimeout.D(); !s.reloader.CloseWithin(limit) {
		s.log.Warnf("the reload under way did not end within start_timeout (%s); stopping anyway", limit)
	}
	s.goDown()
	s.metrics.draining.Set(1)
	s.notify.Stopping("stopping: draining Envoy")
	stopEnvoy()
}

// watchdogStop is systemd's watchdog firing (SIGABRT, the unit's
// WatchdogSignal=): Envoy is stopped at once, without a drain, as
// /quitquitquit does. Its admin API has been silent for the whole of
// WatchdogSec (systemd.RunWatchdog said so at error priority), so it can take
// neither a health-check failure nor a drain, and systemd's stop timeout
// would cut a drain anyway. systemd records the result "watchdog" and
// Restart=on-failure restarts the unit, whatever the agent's exit status.
func (s *supervisor) watchdogStop(stopEnvoy context.CancelFunc) {
	s.log.WithFields(logrus.Fields{"event": "stop", "reason": "watchdog"}).Warnf("SIGABRT (systemd's watchdog): stopping Envoy without a drain")
	s.goDown()
	s.notify.Stopping("stopping: systemd's watchdog fired; Envoy stopped without a drain")
	s.runner.DisableDraining()
	stopEnvoy()
}

func (s *supervisor) finish(err error) error {
	s.goDown()
	s.recordExit(err)
	if err != nil {
		s.notify.Status("Envoy exited: " + firstLine(err.Error()))
		return err
	}
	s.notify.Status("stopped")
	s.log.Infof("envoy-agent stopped")
	return nil
}

// noteLastExit reads how the previous run ended (for the status report)
// and which unit this one runs as.
func (s *supervisor) noteLastExit() {
	rec, err := lastexit.Read(lastexit.Path(os.Getenv(EnvInstance)))
	if err != nil {
		s.log.Warnf("%v", err)
	}
	var prev *control.PreviousExit
	if rec != nil {
		prev = &control.PreviousExit{At: rec.At, Pid: rec.Pid, Reason: rec.Reason}
	}
	s.report.previousRun(systemdUnit(), prev)
}

// recordExit keeps why this run ends (err; nil for a clean stop) for the
// next run's status report.
func (s *supervisor) recordExit(err error) {
	if werr := lastexit.Write(lastexit.Path(os.Getenv(EnvInstance)), err); werr != nil {
		s.log.Warnf("%v", werr)
	}
}

func (s *supervisor) drainNow() {
	s.report.drainBegan("endless", 0)
	s.metrics.draining.Set(1)
	s.goDown()
	s.runner.DrainNow()
	s.notify.Status("draining with no end (POST /drain); the next stop exits at once")
}

// drainProgress returns what keeps STATUS= current during a stop's drain
// and extends systemd's stop timeout so that it never cuts a configured
// drain short; the drain's goroutine calls it (envoy.Agent.OnDrainProgress).
func (s *supervisor) drainProgress() func(envoy.DrainProgress) {
	var lastExtend time.Duration // the drain time of the last EXTEND_TIMEOUT_USEC
	return func(p envoy.DrainProgress) {
		s.report.drainProgress(p)
		s.metrics.drainSeconds.Set(p.Elapsed.Seconds())
		s.metrics.drainEnded(s.metrics.drainsIncompleteStop, p)
		conns := "unknown"
		if p.ActiveConnections >= 0 {
			conns = strconv.Itoa(p.ActiveConnections)
		}
		if p.Done {
			s.notify.Status(fmt.Sprintf("drained for %s (%s); stopping Envoy", p.Elapsed.Round(100*time.Millisecond), p.Reason))
			s.notify.ExtendTimeout(envoy.DefaultQuitGrace + stopExtendMargin)
			return
		}
		s.notify.Status(fmt.Sprintf("draining: %s active connections, %s left", conns, p.Remaining.Round(time.Second)))
		// Once a second is plenty: each extension covers the whole rest.
		if p.Elapsed-lastExtend >= drainExtendEvery || lastExtend == 0 {
			lastExtend = max(p.Elapsed, 1)
			s.notify.ExtendTimeout(p.Remaining + envoy.DefaultQuitGrace + stopExtendMargin)
		}
	}
}
