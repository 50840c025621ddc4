//go:build linux

package systemd

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// TestRunWatchdog: pings while the check passes; once it fails, one line
// at error priority with the check's reason and how long Envoy has been
// silent, and no ping until it passes again (then a line says so).
func TestRunWatchdog(t *testing.T) {
	const interval = 400 * time.Millisecond // pings every 200ms, checks get 100ms
	var silent atomic.Bool
	pings := make(chan time.Time, 1000)
	log, hook := test.NewNullLogger()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go RunWatchdog(ctx, interval, func(context.Context) error {
		if silent.Load() {
			return errors.New("the admin API of Envoy pid 7 does not answer")
		}
		return nil
	}, func() { pings <- time.Now() }, log)

	for i := range 3 {
		select {
		case <-pings:
		case <-time.After(10 * interval):
			t.Fatalf("ping %d never came while Envoy answered", i+1)
		}
	}
	silent.Store(true)
	errorLines := func() []*logrus.Entry {
		var out []*logrus.Entry
		for _, e := range hook.AllEntries() {
			if e.Level == logrus.ErrorLevel {
				out = append(out, e)
			}
		}
		return out
	}
	if !envoykit.Eventually(10*interval, func() bool { return len(errorLines()) > 0 }) {
		t.Fatalf("no error line once Envoy was silent; log: %v", hook.AllEntries())
	}
	gaveUp := errorLines()[0]
	msg := gaveUp.Message
	for _, want := range []string{"the admin API of Envoy pid 7 does not answer", "no answer for ", "no more pings", "WatchdogSec=400ms"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error line %q lacks %q", msg, want)
		}
	}
	// Silent for three more periods: no ping after the error line (one sent
	// before it may still be in the channel), and no second error line.
	window := time.After(3 * interval / 2)
	for quiet := true; quiet; {
		select {
		case at := <-pings:
			if at.After(gaveUp.Time) {
				t.Fatalf("a ping %s after the watchdog gave up", at.Sub(gaveUp.Time))
			}
		case <-window:
			quiet = false
		}
	}
	if n := len(errorLines()); n != 1 {
		t.Errorf("%d error lines while Envoy stayed silent; want one: %v", n, hook.AllEntries())
	}
	silent.Store(false)
	select {
	case <-pings:
	case <-time.After(10 * interval):
		t.Fatalf("no ping once Envoy answered again")
	}
	if !envoykit.Eventually(10*interval, func() bool {
		return strings.Contains(hook.LastEntry().Message, "pings resume") && hook.LastEntry().Level == logrus.InfoLevel
	}) {
		t.Errorf("no info line saying the pings resume: %v", hook.LastEntry())
	}
}

func TestWatchdogInterval(t *testing.T) {
	self := strconv.Itoa(os.Getpid())
	tests := []struct {
		name    string
		usec    string
		pid     string
		want    time.Duration
		wantErr bool
	}{
		{"off", "", "", 0, false},
		{"ours", "2000000", self, 2 * time.Second, false},
		{"no pid: ours", "2000000", "", 2 * time.Second, false},
		{"another process's", "2000000", "1", 0, false},
		{"malformed interval", "two seconds", self, 0, true},
		{"malformed pid", "2000000", "me", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("WATCHDOG_USEC", tt.usec)
			t.Setenv("WATCHDOG_PID", tt.pid)
			if tt.usec == "" {
				os.Unsetenv("WATCHDOG_USEC")
			}
			if tt.pid == "" {
				os.Unsetenv("WATCHDOG_PID")
			}
			got, err := WatchdogInterval()
			if got != tt.want || (err != nil) != tt.wantErr {
				t.Fatalf("watchdogInterval() = %s, %v; want %s, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}
