//go:build linux

package systemd

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"
)

// The first SIGTERM ends the context (with the signal as its cause); the
// next one, SIGHUP and SIGUSR1 arrive on their channels.
func TestNotifySignals(t *testing.T) {
	ctx, sigs, stop := NotifySignals(context.Background())
	defer stop()
	self := os.Getpid()
	wait := func(name string, ch <-chan os.Signal, want os.Signal) {
		t.Helper()
		select {
		case got := <-ch:
			if got != want {
				t.Fatalf("%s got %v, want %v", name, got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no %v on %s", want, name)
		}
	}
	if err := syscall.Kill(self, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	wait("Reload", sigs.Reload, syscall.SIGHUP)
	if err := syscall.Kill(self, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	wait("Reopen", sigs.Reopen, syscall.SIGUSR1)
	if ctx.Err() != nil {
		t.Fatalf("the context ended before any stop signal: %v", context.Cause(ctx))
	}
	if err := syscall.Kill(self, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("SIGTERM did not end the context")
	}
	var ss *StopSignal
	if !errors.As(context.Cause(ctx), &ss) || ss.Signal != syscall.SIGTERM || StopReason(ctx) != "terminated" {
		t.Fatalf("cause %v, reason %q; want SIGTERM, \"terminated\"", context.Cause(ctx), StopReason(ctx))
	}
	if err := syscall.Kill(self, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	wait("Again", sigs.Again, syscall.SIGINT)
}
