//go:build linux

// Package handover is the live upgrade of the agent as seen from either
// side of the exec (`envoy-agent upgrade`): the old agent re-executes the
// new binary in its own process (execve keeps the PID, so systemd's MAINPID
// and NotifyAccess=main stay right, and the Envoys stay its children) and
// hands over its listeners, claim files and running Envoy in a versioned
// state file (State) named by $ENVOY_AGENT_HANDOVER.
//
// The old agent asks the new binary, before anything changes, whether it
// can take over (ProbeBinary runs `version --handover`, CheckBinary
// `version --handover-check STATE`); the new binary answers from this
// package too (VersionText, CheckState), so both ends speak one format.
// The format's versions are the compatibility rule: an agent writes one
// version and reads several, and an older agent's file is read by a newer
// one, so the JSON and its version numbers never change once released.
// Then the old agent writes the state (Write), keeps its listeners and the
// binary's fd open across the exec (State.KeepListeners, InheritBinary) and
// execs (Exec); the new agent closes that fd (CloseExecFD), takes the state
// (Take) and adopts the listeners (State.AdoptListeners).
//
// The daemon (package service) drives the upgrade: it decides when, hands
// Envoy's own state (envoy/reexec) and the claim files over, and reports to
// systemd; this package knows nothing of the supervisor.
package handover
