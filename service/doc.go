//go:build linux

// Package service is envoy-agent's systemd host service: it reads the TOML
// configuration into an envoy.ProxyConfig, runs the envoy.Agent, speaks the
// sd_notify protocol (READY, STATUS, WATCHDOG, STOPPING, EXTEND_TIMEOUT_USEC),
// handles signals, and serves the loopback status server and the merged
// Prometheus metrics.
package service
