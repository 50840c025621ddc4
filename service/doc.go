//go:build linux

// Package service is envoy-agent's daemon, `envoy-agent run`: it loads the
// configuration (package config), runs Envoy through the envoy package's
// Agent, and serves what an operator and systemd talk to: readiness and the
// watchdog through package systemd, the loopback health port
// (/healthz/ready), the merged Prometheus metrics, and the control socket
// (package control) for reload (in place where the serving Envoy can take
// the change, else a hot restart, or a drain and restart for an Envoy built
// without hot restart), drain, quit, status, log reopening and the live
// upgrade, in which the agent re-executes its new binary and hands the
// running Envoy over (package handover). It also claims its base_id and
// ports against other agents on the host (package claims) and watches the
// installed Envoy binary for replacement. It reaches Envoy through what it
// needs of it (proxy.go), which a unit test's fake stands in for.
package service
