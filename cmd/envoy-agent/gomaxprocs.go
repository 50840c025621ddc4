//go:build linux

package main

import (
	"os"
	"runtime"
)

// oneProcessor gives `envoy-agent run` one Go processor (GOMAXPROCS=1)
// unless the operator set GOMAXPROCS in its environment. The agent's
// goroutines mostly wait: on Envoy's admin API, its own sockets, timers and
// child processes. With a second processor idle, every goroutine that
// wakes (a watchdog ping, an answer from Envoy) also wakes an idle thread to
// look for work, which finds none: on an idle agent with a 1 s watchdog
// ping that is about a third of its context switches and a fifth of its
// CPU, and during a start it competes with Envoy for the host's cores
// (docs/design.md, section 2). Setting it also stops the Go runtime's
// once-a-second re-reading of the cgroup's CPU limit.
func oneProcessor() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
}
