//go:build linux

package envoy

import (
	"context"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// epochsRunning counts the epochs not yet reaped.
func (e *Envoy) epochsRunning() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for p := range e.procs {
		if !p.exited() {
			n++
		}
	}
	return n
}

// Issue 14, item 2: the agent's POST /drain and POST /quitquitquit while a
// hot restart replaces the configuration. Run with -race (make test does):
// the drain reads the configuration the hot restart writes. Either way the
// agent must end with no Envoy left.
func TestDrainOrQuitDuringAHotRestart(t *testing.T) {
	tests := []struct {
		name   string
		during func(le *liveEnvoy)
	}{
		{"drain", func(le *liveEnvoy) { le.agent.DrainNow() }},
		{"quitquitquit", func(le *liveEnvoy) { le.agent.DisableDraining(); le.cancel() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			le := startAgent(t, agentOptions{termination: 5 * time.Second, minDrain: time.Second, drainDuration: time.Second})
			cfg := le.proxy.config()
			// The new epoch stays INITIALIZING for a second, so that the
			// drain or the quit comes while the hot restart waits for it.
			cfg.ConfigPath = envoykit.WriteBootstrap(t, le.proxy.runDir, "v1.yaml",
				envoykit.BootstrapOptions{Ports: le.ports, ResponseHeader: "v1", InitDelay: time.Second})
			pids := []int{le.proxy.Pid()}
			restarted := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				_, err := le.proxy.HotRestart(ctx, cfg)
				restarted <- err
			}()
			if !envoykit.Eventually(10*time.Second, func() bool { return le.proxy.epochsRunning() == 2 }) {
				t.Fatalf("the new epoch never started")
			}
			le.proxy.mu.Lock()
			for p := range le.proxy.procs {
				if p.pid != pids[0] {
					pids = append(pids, p.pid)
				}
			}
			le.proxy.mu.Unlock()
			tt.during(le)
			// What a stop reads of the configuration (its quit grace),
			// over and over until the hot restart has written it: -race
			// then sees any read that the proxy's lock does not order.
			// (The HTTP calls of a drain or a quit alone share the admin
			// client's connection pool with the hot restart, whose locks
			// order them by chance.)
			var err error
			for done := false; !done; {
				_ = le.proxy.quitGrace()
				select {
				case err = <-restarted:
					done = true
				case <-time.After(time.Millisecond):
				}
			}
			_ = le.proxy.quitGrace()
			t.Logf("the hot restart returned %v", err)
			le.agent.DisableDraining()
			if took, err := le.stop(t, 20*time.Second); err != nil {
				t.Fatalf("stop: %v after %s", err, took)
			}
			for _, pid := range pids {
				if !envoykit.Eventually(5*time.Second, func() bool { return !envoykit.Alive(pid) }) {
					t.Errorf("envoy pid %d outlived the agent", pid)
				}
			}
		})
	}
}
