//go:build linux

package certs

// WithoutInotify makes m run as it does when inotify cannot be had (the
// per-user limit of instances reached): a fault the real Envoy cannot show.
func WithoutInotify(m *Manager) { m.noInotify = true }

// WatchDirs are the folders m watches (watchDirs).
func WatchDirs(m *Manager) map[string]uint32 { return m.watchDirs() }
