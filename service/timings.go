//go:build linux

package service

import (
	"time"

	"github.com/envoy-agent/envoy-agent/envoy"
)

// Timings of the service that have no better home beside their use, each
// with why it has its value. The ones an operator sets are in the
// configuration (schema.go).
const (
	// startExtendMargin is added to start_timeout in the EXTEND_TIMEOUT_USEC
	// sent at start: the agent's own start-up and the stop of an Envoy that
	// missed the deadline must fit too.
	startExtendMargin = 10 * time.Second

	// stopExtendMargin is added to what a drain still needs (and to Envoy's
	// quit grace) in EXTEND_TIMEOUT_USEC: the agent's exit after Envoy's.
	stopExtendMargin = 5 * time.Second

	// drainExtendEvery is how often a drain renews EXTEND_TIMEOUT_USEC:
	// each one covers the whole rest of the drain, so once a second is
	// plenty, and the journal is not flooded.
	drainExtendEvery = time.Second

	// readyProbeTimeout bounds one /ready poll while Envoy starts: the
	// admin answers in milliseconds, and the poll runs again at once.
	readyProbeTimeout = time.Second

	// drainRestartStopBound is what the bound of a drain and restart
	// (reloadTimeout) allows for stopping the drained Envoy between its
	// drain and the new one's start: the quit grace of the serving epoch,
	// then for an epoch left by a hot restart, its own exit and the grace
	// after SIGTERM.
	drainRestartStopBound = 3 * envoy.DefaultQuitGrace

	// serverInfoTimeout bounds the /server_info read after the first LIVE
	// (Envoy's version and hot-restart version, for the log and reloads).
	serverInfoTimeout = 5 * time.Second
)
