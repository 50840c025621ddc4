//go:build linux

// Package output relays what one Envoy process writes on its stdout and
// stderr to the agent's own outputs: a whole line at a time (so that the
// lines of two epochs sharing an output never interleave mid-line, and each
// keeps the level Envoy gave it, LogLevel), with the copies of the
// configuration Envoy prints on stderr left out (Redact: bootstraps hold
// secrets), and with stderr's last lines kept for the report of an Envoy
// that failed (Relay.LastLines).
//
// It knows nothing of processes: package envoy starts Envoy and copies its
// pipes into a Relay.
package output
