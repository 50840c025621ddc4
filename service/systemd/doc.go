//go:build linux

// Package systemd is the agent's side of systemd and of its own process: the
// sd_notify protocol (READY, RELOADING, STATUS, STOPPING, WATCHDOG,
// EXTEND_TIMEOUT_USEC), the watchdog's interval and pings, the signals
// `envoy-agent run` takes (SIGTERM, SIGINT, SIGHUP, SIGUSR1), SIGPIPE, and
// the logger whose lines journald reads with their priority.
package systemd
