//go:build linux

package envoy

import "context"

// The Envoy's side of the connection count (package conncount): the pids
// of its epochs not yet reaped, and the fallback to the admin API's stats.

// ActiveConnections counts the downstream connections of every epoch not
// yet reaped (the serving one and those still draining after a hot
// restart), from the kernel's socket tables: complete and current, where
// Envoy's own gauges are neither right after a hot restart. Only when
// /proc cannot be read does it answer the serving epoch's stats.
func (e *Envoy) ActiveConnections(ctx context.Context) (int, error) {
	n, err := e.countConnections(nil)
	if err == nil {
		return n, nil
	}
	if m, aerr := e.admin.ActiveConnections(ctx); aerr == nil {
		return m, nil
	}
	return 0, err
}

// epochListening reports whether process p still holds a listening TCP
// socket, that is, whether it may still accept connections. A replaced
// epoch closes its listening sockets when the new epoch, past LIVE, tells
// it to drain; until then a connection can still land on it, and ending
// it then cuts that connection's request.
func (e *Envoy) epochListening(p *process) (bool, error) {
	return e.conns.Listening(p.pid)
}

// epochConnections counts the downstream connections process p holds.
func (e *Envoy) epochConnections(p *process) (int, error) {
	return e.countConnections(p)
}

// countConnections counts the downstream connections of every epoch not
// yet reaped (of only alone when it is not nil).
func (e *Envoy) countConnections(only *process) (int, error) {
	e.mu.Lock()
	var pids []int
	for p := range e.procs {
		if !p.exited() {
			pids = append(pids, p.pid)
		}
	}
	adminPort := int(e.cfg.AdminPort)
	e.mu.Unlock()
	if len(pids) == 0 {
		return 0, nil
	}
	if only != nil {
		return e.conns.CountHeld(pids, only.pid, adminPort)
	}
	return e.conns.Count(pids, adminPort)
}
