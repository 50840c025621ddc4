//go:build linux

package systemd

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/sirupsen/logrus"
)

// Notifier speaks the sd_notify protocol to $NOTIFY_SOCKET. Without that
// variable (not under systemd) every call is a no-op.
type Notifier struct {
	log *logrus.Logger

	mu         sync.Mutex
	lastStatus string
}

func NewNotifier(log *logrus.Logger) *Notifier { return &Notifier{log: log} }

// send writes one datagram of newline-separated assignments.
func (n *Notifier) send(assignments ...string) {
	msg := strings.Join(assignments, "\n")
	if _, err := daemon.SdNotify(false, msg); err != nil {
		n.log.Warnf("sd_notify %q: %v", msg, err)
	}
}

// Ready tells systemd that start-up or a reload is finished.
func (n *Notifier) Ready(status string) {
	n.mu.Lock()
	n.lastStatus = status
	n.mu.Unlock()
	n.send(daemon.SdNotifyReady, "STATUS="+status)
}

// Status sets the line `systemctl status` shows; repeats are not sent.
func (n *Notifier) Status(status string) {
	n.mu.Lock()
	same := status == n.lastStatus
	n.lastStatus = status
	n.mu.Unlock()
	if !same {
		n.send("STATUS=" + status)
	}
}

// Stopping tells systemd the agent is shutting down.
func (n *Notifier) Stopping(status string) {
	n.mu.Lock()
	n.lastStatus = status
	n.mu.Unlock()
	n.send(daemon.SdNotifyStopping, "STATUS="+status)
}

// Reloading tells systemd a reload has begun; under Type=notify-reload the
// same datagram must carry MONOTONIC_USEC.
func (n *Notifier) Reloading(status string) {
	n.mu.Lock()
	n.lastStatus = status
	n.mu.Unlock()
	n.send(daemon.SdNotifyReloading, strings.TrimSuffix(daemon.SdNotifyMonotonicUsec(), "\n"), "STATUS="+status)
}

// Watchdog feeds systemd's watchdog.
func (n *Notifier) Watchdog() { n.send(daemon.SdNotifyWatchdog) }

// ExtendTimeout asks systemd to wait at least d more for the current
// start or stop.
func (n *Notifier) ExtendTimeout(d time.Duration) {
	n.send("EXTEND_TIMEOUT_USEC=" + strconv.FormatInt(d.Microseconds(), 10))
}
