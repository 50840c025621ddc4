//go:build linux

package systemd

import (
	"context"
	"fmt"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
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

// RunWatchdog pings systemd's watchdog every interval/2 while alive answers
// within that time, so a wedged Envoy (its admin API silent) stops the pings
// and systemd restarts the unit. It returns when ctx ends.
func RunWatchdog(ctx context.Context, interval time.Duration, alive func(context.Context) bool, ping func()) {
	period := interval / 2
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		probeCtx, cancel := context.WithTimeout(ctx, period)
		ok := alive(probeCtx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if ok {
			ping()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
