//go:build linux

// Package claims keeps the agents of one host apart, and names who holds
// what when they clash. Several agents on one host (envoy-agent@.service)
// must not share a base_id (Envoy's shared memory) or a port. An agent
// holds what it uses through locks on files in the claims directory
// (dir.go), shared by every agent of the host: base-id-N and port-P, each
// locked (an open file description lock, F_OFD_SETLK) for as long as the
// agent lives; the kernel drops the lock when it dies, so nothing goes
// stale, and the lock's fd is handed over across a live upgrade
// (handover.go), so there is no moment without it. The holder writes who it
// is (JSON) into the file, so a clash names the other instance. Only root
// and the service's user can write in that directory: another local user
// can neither take a claim first nor fake an answer (the abstract sockets
// used before could be bound by anyone).
//
// The base id claim is exclusive: a second agent refuses to start (Take).
// Port claims only name the holder once the real bind has failed: the
// agent's own ports (Listen), Envoy's admin port (CheckAdminPortFree) and
// the ports Envoy's start failed on (AgentOnPort); a port no agent claims
// is named by its owner in /proc (portowner.go).
package claims
