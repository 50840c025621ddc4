//go:build linux

package systemd

import (
	"context"
	"fmt"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/sirupsen/logrus"
)

// WatchdogInterval is systemd's WatchdogSec for this process: 0 and no
// error when the watchdog is off (or meant for another process), 0 and an
// error when WATCHDOG_USEC or WATCHDOG_PID cannot be read, in which case
// systemd expects pings that the agent cannot time.
func WatchdogInterval() (time.Duration, error) {
	d, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		return 0, fmt.Errorf("systemd's watchdog settings: %w", err)
	}
	return d, nil
}

// RunWatchdog pings systemd's watchdog every interval/2 while check finds
// Envoy alive, so a wedged Envoy (its admin API silent) stops the pings and
// systemd stops the unit. A check gets a quarter of the interval, so that a
// silent Envoy is known well before systemd's deadline: once the next ping
// could only come after that deadline, the agent says so in one line at
// error priority, naming what stopped answering and for how long (the cause
// the operator needs; systemd's own line says only "Watchdog timeout"). A
// line at info priority says when pings resume. It returns when ctx ends.
func RunWatchdog(ctx context.Context, interval time.Duration, check func(context.Context) error, ping func(), log logrus.FieldLogger) {
	period := interval / 2
	probe := interval / 4
	t := time.NewTicker(period)
	defer t.Stop()
	lastPing := time.Now() // systemd's timer runs from the fork; the first check comes at once
	gaveUp := false
	for {
		probeCtx, cancel := context.WithTimeout(ctx, probe)
		err := check(probeCtx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		now := time.Now()
		switch {
		case err == nil:
			if gaveUp {
				log.WithField("event", "watchdog").Infof("watchdog: Envoy answers again after %s without a ping; pings resume", now.Sub(lastPing).Round(100*time.Millisecond))
				gaveUp = false
			}
			ping()
			lastPing = now
		case !gaveUp && now.Add(period).Sub(lastPing) >= interval:
			gaveUp = true
			silent := now.Sub(lastPing).Round(100 * time.Millisecond)
			left := max(interval-now.Sub(lastPing), 0).Round(100 * time.Millisecond)
			log.WithFields(logrus.Fields{"event": "watchdog", "silent": silent.String()}).Errorf(
				"watchdog: %v; no answer for %s, so no more pings: systemd's watchdog (WatchdogSec=%s) stops the unit in %s unless Envoy answers",
				err, silent, interval, left)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
