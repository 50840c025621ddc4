// Package monitoring holds what envoy-agent's packages ship under
// /usr/share/envoy-agent/monitoring/: the Prometheus alerting and recording
// rules (envoy-agent.rules.yml, unit-tested by envoy-agent.rules.test.yml)
// and the Grafana dashboard (envoy-agent.dashboard.json). The package has no
// code; its tests check the rules with promtool and, live, run a real
// Prometheus against a real agent and Envoy (docs/operations.md,
// "Monitoring").
package monitoring
