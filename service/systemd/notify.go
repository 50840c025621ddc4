//go:build linux

package systemd

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/sirupsen/logrus"
)

// notifyTimeout bounds one datagram's send to $NOTIFY_SOCKET. The socket's
// queue is short (net.unix.max_dgram_qlen, 10 by default) and a send waits
// while it is full; systemd empties it at once, but a reader that has
// stopped reading (a wedged manager, a test harness after READY=1) must not
// hold a drain, a stop or the watchdog for ever: past the bound the
// message is dropped, and said.
const notifyTimeout = time.Second

// Notifier speaks the sd_notify protocol to $NOTIFY_SOCKET. Without that
// variable (not under systemd) every call is a no-op.
type Notifier struct {
	log     *logrus.Logger
	timeout time.Duration // bounds one send (notifyTimeout)

	mu         sync.Mutex
	lastStatus string
}

// NewNotifier returns a Notifier that logs failed sends to log.
func NewNotifier(log *logrus.Logger) *Notifier { return &Notifier{log: log, timeout: notifyTimeout} }

// send writes one datagram of newline-separated assignments.
func (n *Notifier) send(assignments ...string) {
	msg := strings.Join(assignments, "\n")
	if err := sdNotify(msg, n.timeout); err != nil {
		n.log.Warnf("sd_notify %q: %v", msg, err)
	}
}

// sdNotify sends msg to $NOTIFY_SOCKET as go-systemd's daemon.SdNotify
// does (a unixgram datagram; a leading '@' names an abstract socket), but
// within timeout: daemon.SdNotify's write has no deadline.
func sdNotify(msg string, timeout time.Duration) error {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetWriteDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	if _, err := conn.Write([]byte(msg)); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("not sent: %s's queue stayed full for %s (its reader is not reading)", path, timeout)
		}
		return err
	}
	return nil
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
