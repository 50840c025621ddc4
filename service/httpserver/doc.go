//go:build linux

// Package httpserver is the agent's HTTP servers: the loopback status port
// (Status: GET /healthz/ready for local probes and load balancers), the
// Prometheus metrics port (Metrics: Envoy's /stats/prometheus, read once for
// every scraper that arrives together, followed by the agent's own metrics),
// and Serve, which runs any of the agent's HTTP servers (the control socket's
// too) within Limits, so that clients that open connections and leave them
// idle cannot grow the agent. The daemon (package service) gives each server
// what it needs: the readiness question, Envoy's admin client, the writer of
// its own metrics; this package knows nothing of the supervisor.
package httpserver
