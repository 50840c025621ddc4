//go:build linux

// Package config reads envoy-agent's TOML file into a checked Config: the
// schema and its defaults, the checks (each problem names the file, the line
// and the key), the resolution of relative paths and of the Envoy binary, the
// documentation of every key (KeyDocs, for the README's table and the man
// pages), the keys a reload cannot change and `envoy-agent validate`. It
// logs nothing and imports neither logrus, prometheus, go-systemd nor the
// envoy package (only its leaf packages), so that the man-page generator
// and the control clients link only it; the mapping onto the envoy
// package's ProxyConfig is the service's.
package config
