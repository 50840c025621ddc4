//go:build linux

package systemd

import (
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// ignoreSIGPIPE keeps the agent alive when the reader of its output goes
// away (journald restarting, a closed terminal): Go kills a program that
// writes to a broken pipe on fd 1 or 2 unless SIGPIPE is notified. It is
// notified, not ignored: signal.Ignore would pass SIG_IGN on to Envoy
// through exec, while a notified signal is reset to its default there, so
// Envoy gets the disposition it would get unsupervised. The channel is
// never read; the signals it cannot hold are dropped. It stays for the
// process's life, so that the exit's last words (main printing an error)
// cannot turn a clean exit status into death by SIGPIPE either.
var ignoreSIGPIPE = sync.OnceFunc(func() {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
})

// BestEffortWriter writes to w and reports success whatever happens: the
// agent's log and Envoy's output must keep flowing (Envoy's pipe must keep
// being drained, or Envoy blocks writing its log) when the agent's own
// stderr is gone.
type BestEffortWriter struct{ W io.Writer }

func (b BestEffortWriter) Write(p []byte) (int, error) {
	_, _ = b.W.Write(p)
	return len(p), nil
}
