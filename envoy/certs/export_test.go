//go:build linux

package certs

// WithoutInotify makes m run as it does when inotify cannot be had (the
// per-user limit of instances reached): a fault the real Envoy cannot show.
func WithoutInotify(m *Manager) { m.noInotify = true }

// WatchDirs are the folders m watches (watchDirs).
func WatchDirs(m *Manager) map[string]uint32 { return m.watchDirs() }

// WithoutWatches makes m run as it does when inotify watches cannot be had
// (fs.inotify.max_user_watches reached): a fault the real Envoy cannot show.
func WithoutWatches(m *Manager) { m.noWatches = true }

// Watching is closed once m's Run watches (or polls) its files.
func Watching(m *Manager) <-chan struct{} { return m.watching }
