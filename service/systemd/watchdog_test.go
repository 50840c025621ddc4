//go:build linux

package systemd

import (
	"os"
	"strconv"
	"testing"
	"time"
)

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
