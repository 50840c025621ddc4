//go:build linux

package certs

// WithoutInotify makes m run as it does when inotify cannot be had (the
// per-user limit of instances reached): a fault the real Envoy cannot show.
func WithoutInotify(m *Manager) { m.noInotify = true }
