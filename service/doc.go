//go:build linux

// Package service is envoy-agent's daemon, `envoy-agent run`: it loads the
// configuration (package config), runs the envoy.Agent, and serves what an
// operator and systemd talk to: readiness and the watchdog through package
// systemd, the loopback health port (/healthz/ready), the merged Prometheus
// metrics, and the control socket (package control) for reload (a hot
// restart of Envoy), drain, quit, status, log reopening and the live upgrade,
// in which the agent re-executes its new binary and hands the running Envoy
// over (package handover). It also claims its base_id and ports against other agents on the
// host (package claims) and watches the installed Envoy binary for
// replacement.
package service
