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

	"github.com/envoy-agent/envoy-agent/internal/printable"
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

	// The socket the datagrams go out on, kept between sends: a watchdog
	// ping is then one write, not a socket's creation, connection and
	// close. A send holds slot (a token in it) while it uses conn, and
	// waits for it only within its own bound.
	slot     chan struct{}
	conn     *net.UnixConn
	connPath string // the $NOTIFY_SOCKET conn is connected to
}

// NewNotifier returns a Notifier that logs failed sends to log.
func NewNotifier(log *logrus.Logger) *Notifier {
	return &Notifier{log: log, timeout: notifyTimeout, slot: make(chan struct{}, 1)}
}

// send writes one datagram of newline-separated assignments.
func (n *Notifier) send(assignments ...string) {
	msg := strings.Join(assignments, "\n")
	if err := n.sendDatagram(msg); err != nil {
		n.log.Warnf("sd_notify %q: %v", msg, err)
	}
}

// sendDatagram sends msg to $NOTIFY_SOCKET as go-systemd's daemon.SdNotify
// does (a unixgram datagram; a leading '@' names an abstract socket), but
// within n.timeout (daemon.SdNotify's write has no deadline) and on a
// socket kept from one send to the next. The bound covers the whole send:
// the wait for another send to finish with the socket, and the write. A
// send that fails for another reason than the bound (systemd re-created its
// socket: a daemon-reexec) is tried once more on a new socket, within the
// same bound.
func (n *Notifier) sendDatagram(msg string) error {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	deadline := time.Now().Add(n.timeout)
	err := os.ErrDeadlineExceeded
	if n.takeSlot(deadline) {
		err = n.write(path, msg, deadline)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			n.closeConn()
			err = n.write(path, msg, deadline)
		}
		<-n.slot
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("not sent: %s's queue stayed full for %s (its reader is not reading)", path, n.timeout)
	}
	return err
}

// takeSlot waits until deadline for the socket to be free, and reports
// whether it got it. Only a send that finds it taken starts a timer.
func (n *Notifier) takeSlot(deadline time.Time) bool {
	select {
	case n.slot <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case n.slot <- struct{}{}:
		return true
	case <-t.C:
		return false
	}
}

// write sends msg on the kept socket by deadline, connecting it to path
// first when it is not yet (or was connected to another path). The caller
// holds the slot.
func (n *Notifier) write(path, msg string, deadline time.Time) error {
	if n.conn != nil && n.connPath != path {
		n.closeConn()
	}
	if n.conn == nil {
		conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
		if err != nil {
			return err
		}
		n.conn, n.connPath = conn, path
	}
	if err := n.conn.SetWriteDeadline(deadline); err != nil {
		return err
	}
	_, err := n.conn.Write([]byte(msg))
	return err
}

// closeConn drops the kept socket. The caller holds the slot.
func (n *Notifier) closeConn() {
	if n.conn != nil {
		_ = n.conn.Close()
		n.conn, n.connPath = nil, ""
	}
}

// statusLine is the STATUS= assignment of status, its control characters
// escaped: it carries Envoy's reasons and paths to `systemctl status`, and a
// newline in it would start another assignment (READY=1, MAINPID=).
func statusLine(status string) string {
	return "STATUS=" + printable.String(status)
}

// Ready tells systemd that start-up or a reload is finished.
func (n *Notifier) Ready(status string) {
	n.mu.Lock()
	n.lastStatus = status
	n.mu.Unlock()
	n.send(daemon.SdNotifyReady, statusLine(status))
}

// Status sets the line `systemctl status` shows; repeats are not sent.
func (n *Notifier) Status(status string) {
	n.mu.Lock()
	same := status == n.lastStatus
	n.lastStatus = status
	n.mu.Unlock()
	if !same {
		n.send(statusLine(status))
	}
}

// Stopping tells systemd the agent is shutting down.
func (n *Notifier) Stopping(status string) {
	n.mu.Lock()
	n.lastStatus = status
	n.mu.Unlock()
	n.send(daemon.SdNotifyStopping, statusLine(status))
}

// Reloading tells systemd a reload has begun; under Type=notify-reload the
// same datagram must carry MONOTONIC_USEC.
func (n *Notifier) Reloading(status string) {
	n.mu.Lock()
	n.lastStatus = status
	n.mu.Unlock()
	n.send(daemon.SdNotifyReloading, strings.TrimSuffix(daemon.SdNotifyMonotonicUsec(), "\n"), statusLine(status))
}

// Watchdog feeds systemd's watchdog.
func (n *Notifier) Watchdog() { n.send(daemon.SdNotifyWatchdog) }

// ExtendTimeout asks systemd to wait at least d more for the current
// start or stop.
func (n *Notifier) ExtendTimeout(d time.Duration) {
	n.send("EXTEND_TIMEOUT_USEC=" + strconv.FormatInt(d.Microseconds(), 10))
}
