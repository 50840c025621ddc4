//go:build linux

package systemd

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// Signals are what `envoy-agent run` does on signals, taken once, at the
// top (cmd/envoy-agent), before anything else can be interrupted: the first
// SIGTERM or SIGINT ends the context Run is given (the stop: a drain), and
// the others arrive on channels. SIGPIPE is caught and dropped
// (ignoreSIGPIPE).
type Signals struct {
	// Again gets a SIGTERM or SIGINT after the first: end the drain now.
	Again <-chan os.Signal
	// Reload gets SIGHUP: reload, as `envoy-agent reload` does.
	Reload <-chan os.Signal
	// Reopen gets SIGUSR1: have Envoy reopen its log files.
	Reopen <-chan os.Signal
	// Watchdog gets SIGABRT, systemd's WatchdogSignal= (the unit's
	// default): stop Envoy without a drain. Taken, so that the Go runtime
	// does not answer it with a dump of every goroutine's stack: the
	// agent's watchdog has already said why at error priority.
	Watchdog <-chan os.Signal
}

// StopSignal is the cause of the context NotifySignals returns once a
// SIGTERM or SIGINT ended it.
type StopSignal struct{ Signal os.Signal }

func (s *StopSignal) Error() string { return s.Signal.String() }

// NotifySignals starts taking the signals of Signals. The context ends at
// the first SIGTERM or SIGINT, with a *StopSignal as its cause; stop
// releases the signals. Channels that are full drop a signal (one pending
// reload or reopen stands for many).
func NotifySignals(parent context.Context) (ctx context.Context, sigs *Signals, stop func()) {
	ignoreSIGPIPE()
	ch := make(chan os.Signal, 8)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGABRT)
	ctx, cancel := context.WithCancelCause(parent)
	again, reload, reopen, watchdog := make(chan os.Signal, 1), make(chan os.Signal, 1), make(chan os.Signal, 1), make(chan os.Signal, 1)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case sig := <-ch:
				switch sig {
				case syscall.SIGHUP:
					offer(reload, sig)
				case syscall.SIGUSR1:
					offer(reopen, sig)
				case syscall.SIGABRT:
					offer(watchdog, sig)
				default:
					if ctx.Err() == nil {
						cancel(&StopSignal{sig})
					} else {
						offer(again, sig)
					}
				}
			}
		}
	}()
	stop = func() {
		signal.Stop(ch)
		close(done)
		cancel(context.Canceled)
	}
	return ctx, &Signals{Again: again, Reload: reload, Reopen: reopen, Watchdog: watchdog}, stop
}

func offer(ch chan os.Signal, sig os.Signal) {
	select {
	case ch <- sig:
	default:
	}
}

// StopReason says why ctx ended, for the log.
func StopReason(ctx context.Context) string {
	if s, ok := context.Cause(ctx).(*StopSignal); ok {
		return s.Signal.String()
	}
	return "the agent's context ended"
}
