//go:build linux

// Package hostfiles knows the files that one agent and its Envoys keep on
// the host outside any process: the run folder (CheckRunDir), Envoy's
// hot-restart sockets in it, Envoy's hot-restart shared memory in /dev/shm (the only
// place its name, SharedMemoryPath, is computed), and what an agent killed
// with SIGKILL left of them (ClearLeftovers). The sockets and the shared
// memory are named from the base id, as Envoy names them.
//
// Package envoy uses it to run Envoy; the service, to check a configuration
// and to explain a failed start.
package hostfiles

// Logger is where ClearLeftovers says what it removed (envoy.Logger is one).
type Logger interface {
	Infof(format string, args ...any)
	Warnf(format string, args ...any)
}
