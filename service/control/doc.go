//go:build linux

// Package control is the agent's control socket: the unix-socket server that
// checks each peer's credentials (SO_PEERCRED) before it routes quit, drain,
// reload, status, reopen-logs and upgrade to the daemon's functions; the
// wire types those routes answer (ReloadResult, StatusReport, ReopenResult,
// UpgradeAnswer); and the clients that `envoy-agent reload`, `status`,
// `upgrade` and `reopen-logs` run, each proving it reached the agent that
// runs the configuration it names.
package control
