//go:build linux

// Package envoy runs and supervises one Envoy process: it builds Envoy's
// command line from a ProxyConfig, starts Envoy in its own process group with
// a parent-death signal, talks to Envoy's admin API (readiness, stats, drain,
// quit) and drives the shutdown sequence (the drain) through Agent.
//
// Its exported API follows Istio's pkg/envoy (Agent, Proxy, ProxyConfig,
// NewAgent, NewProxy, DrainListeners) and adds what plain VMs need: hot-restart
// settings, extra arguments and a parent-shutdown duration. It knows nothing of
// systemd, TOML or log formatting: callers hand it a Logger.
package envoy
