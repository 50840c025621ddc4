//go:build linux

// Package corpus holds the test of bootstraps written the way Envoy's own
// examples write them (testdata/): unnamed listeners on 0.0.0.0, no admin
// or an admin on every address, TLS, SNI, tcp_proxy, UDP, Lua, WebSocket,
// ext_authz, a local rate limit, a Zipkin tracer and Envoy's metrics served
// through a cluster to its own admin. Each runs under a bare Envoy and
// under the agent, with a configuration that names the binary and the
// bootstrap (and what two agents on one host must not share), and must
// run unchanged, answer as the bare Envoy answers, apply a route (or
// cluster) edit in the Envoy that serves, refuse an invalid edit while the
// old answers go on, and stop cleanly. What today's agent cannot do yet is
// listed in one place, knownFailures, which the test holds to account.
package corpus
