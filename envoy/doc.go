//go:build linux

// Package envoy runs and supervises one Envoy process and its hot-restart
// epochs: it builds Envoy's command line from a ProxyConfig, starts Envoy in
// its own process group with a parent-death signal, hot restarts it, drains
// and restarts one built without hot restart, drives the shutdown sequence
// (the drain) through Agent, and carries out a reload as one call
// (Envoy.Reload, on the path a ReloadPlan names). The files each epoch runs
// from are package epochfiles' job, Envoy's admin API is package adminapi's.
//
// Its exported API follows Istio's pkg/envoy (Agent, Proxy, ProxyConfig,
// NewAgent, NewProxy, DrainListeners) and adds what plain VMs need: hot-restart
// settings, extra arguments and a parent-shutdown duration. It knows nothing of
// systemd, TOML or log formatting: callers hand it a Logger.
//
// # Istio compatibility
//
// Istio's API is kept whole, so code written against it compiles here. Three
// of its ProxyConfig fields are accepted and do nothing, since envoy-agent runs
// the operator's bootstrap, changed only where the agent must (envoy/inplace
// draws what), and never changes Envoy's credentials:
// OutlierLogPath (Istio writes it into a generated bootstrap), TestOnly and
// AgentIsRoot (privileges come from the systemd unit). NewAgent's statusPort
// and prometheusPort are accepted and not stored: Istio leaves its own
// Envoy listeners on them out of the drain's count, and here the agent serves
// both ports itself, not through Envoy. Proxy.UpdateConfig
// works (it atomically replaces the bootstrap file, keeping its mode; the next
// start or hot restart reads it) but the agent does not call it: a reload
// reads the file the operator edited.
package envoy
