//go:build linux

package systemd

import (
	"bytes"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

func testLogger() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

func TestNotifierSpeaksTheProtocol(t *testing.T) {
	ns := envoykit.NewNotifySocket(t)
	t.Setenv("NOTIFY_SOCKET", ns.Path)
	n := NewNotifier(testLogger())

	tests := []struct {
		name string
		send func()
		want []string // lines of one datagram
	}{
		{"ready", func() { n.Ready("live: epoch 0") }, []string{"READY=1", "STATUS=live: epoch 0"}},
		{"status", func() { n.Status("draining: 3 active connections") }, []string{"STATUS=draining: 3 active connections"}},
		{"stopping", func() { n.Stopping("stopping") }, []string{"STOPPING=1", "STATUS=stopping"}},
		{"watchdog", n.Watchdog, []string{"WATCHDOG=1"}},
		{"extend timeout", func() { n.ExtendTimeout(12500 * time.Millisecond) }, []string{"EXTEND_TIMEOUT_USEC=12500000"}},
		// Envoy's reason in a status: its newline would start another
		// assignment, its escapes reach `systemctl status`.
		{"a reason with control characters", func() { n.Status("last reload failed: x\nMAINPID=1\x1b[2K") }, []string{`STATUS=last reload failed: x\x0aMAINPID=1\x1b[2K`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(ns.Messages())
			tt.send()
			m := ns.WaitFor(t, tt.want[0], 2*time.Second)
			if got := strings.Split(m.Text, "\n"); strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Fatalf("datagram %q, want %q", m.Text, tt.want)
			}
			if len(ns.Messages()) != before+1 {
				t.Fatalf("want exactly one datagram, got %d", len(ns.Messages())-before)
			}
		})
	}
}

func TestNotifierReloadingCarriesMonotonicUsec(t *testing.T) {
	ns := envoykit.NewNotifySocket(t)
	t.Setenv("NOTIFY_SOCKET", ns.Path)
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	before := ts.Nano() / 1000
	NewNotifier(testLogger()).Reloading("reloading")
	m := ns.WaitFor(t, "RELOADING=1", 2*time.Second)
	var usec int64 = -1
	for _, line := range strings.Split(m.Text, "\n") {
		if v, ok := strings.CutPrefix(line, "MONOTONIC_USEC="); ok {
			usec, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if usec < before || usec > before+10_000_000 {
		t.Fatalf("datagram %q: MONOTONIC_USEC %d is not CLOCK_MONOTONIC now (%d)", m.Text, usec, before)
	}
}

func TestNotifierRepeatsNoStatus(t *testing.T) {
	ns := envoykit.NewNotifySocket(t)
	t.Setenv("NOTIFY_SOCKET", ns.Path)
	n := NewNotifier(testLogger())
	n.Status("a")
	n.Status("a")
	n.Status("b")
	ns.WaitFor(t, "STATUS=b", 2*time.Second)
	if got := len(ns.Messages()); got != 2 {
		t.Fatalf("got %d datagrams for statuses a, a, b; want 2", got)
	}
}

func TestNotifierWithoutSocketIsQuiet(t *testing.T) {
	tests := []struct{ name, socket string }{
		{"unset", ""},
		// Not running under systemd is normal; a socket that went away is
		// worth a warning.
		{"missing socket", filepath.Join(t.TempDir(), "gone")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("NOTIFY_SOCKET", tt.socket)
			var logged bytes.Buffer
			l := logrus.New()
			l.SetOutput(&logged)
			n := NewNotifier(l)
			done := make(chan struct{})
			go func() {
				defer close(done)
				n.Ready("x")
				n.Status("y")
				n.Watchdog()
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatalf("the notifier blocked with NOTIFY_SOCKET=%q", tt.socket)
			}
			warned := strings.Contains(logged.String(), "sd_notify")
			if want := tt.socket != ""; warned != want {
				t.Errorf("NOTIFY_SOCKET=%q: warned %v, want %v; log: %q", tt.socket, warned, want, logged.String())
			}
		})
	}
}

// A reader that has stopped reading: the socket's queue fills, and each
// send gives up at its bound instead of blocking for ever (a drain or a
// stop that reports its progress would hang), and says so.
func TestNotifierDoesNotBlockOnAFullSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NOTIFY_SOCKET", path)
	var logged bytes.Buffer
	l := logrus.New()
	l.SetOutput(&logged)
	n := NewNotifier(l)
	n.timeout = 50 * time.Millisecond
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 30 { // more than the queue holds (net.unix.max_dgram_qlen, 10 by default)
			n.ExtendTimeout(time.Duration(i) * time.Second)
		}
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("30 sends to a socket nobody reads did not return (each should give up after 50ms)")
	}
	if !strings.Contains(logged.String(), "queue stayed full") {
		t.Errorf("no warning about the full socket; log:\n%s", logged.String())
	}
}

// Sends that come together while the socket's queue is full each give up at
// their own bound: one does not wait out another's before its own begins
// (40 senders of 200 ms one after the other would take 6 s).
func TestNotifierBoundsEachOfConcurrentSends(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close() // never read: the queue fills
	t.Setenv("NOTIFY_SOCKET", path)
	n := NewNotifier(testLogger())
	n.timeout = 200 * time.Millisecond
	start := time.Now()
	var wg sync.WaitGroup
	for range 40 {
		wg.Go(n.Watchdog)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("40 sends to a socket nobody reads did not return")
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("40 concurrent sends with a 200ms bound took %s: they waited for each other", took.Round(time.Millisecond))
	}
}

// The notifier keeps its socket between sends; when systemd re-creates its
// own (systemctl daemon-reexec binds a new socket at the same path), the
// next send still arrives, on a new socket.
func TestNotifierFollowsARecreatedSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	listen := func() *net.UnixConn {
		t.Helper()
		c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	receive := func(c *net.UnixConn) string {
		t.Helper()
		buf := make([]byte, 512)
		if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("no datagram: %v", err)
		}
		return string(buf[:n])
	}
	t.Setenv("NOTIFY_SOCKET", path)
	var logged bytes.Buffer
	l := logrus.New()
	l.SetOutput(&logged)
	n := NewNotifier(l)

	first := listen()
	for _, want := range []string{"WATCHDOG=1", "WATCHDOG=1"} {
		n.Watchdog()
		if got := receive(first); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
	first.Close()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	second := listen()
	defer second.Close()
	n.Status("after the re-exec")
	if got := receive(second); got != "STATUS=after the re-exec" {
		t.Fatalf("on the re-created socket got %q, want the status", got)
	}
	if logged.Len() != 0 {
		t.Errorf("warned although the datagram arrived: %s", logged.String())
	}
}
