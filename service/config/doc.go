//go:build linux

// Package config reads envoy-agent's TOML file into a checked Config: the
// schema and its defaults, the checks (each problem names the file, the line
// and the key), the resolution of relative paths and of the Envoy binary, the
// documentation of every key (KeyDocs, for the README's table and the man
// pages), the keys a reload cannot change, `envoy-agent validate`, and the
// mapping onto the envoy package's ProxyConfig. It logs nothing and imports
// neither logrus, prometheus nor go-systemd, so that the man-page generator
// and the control clients link only it.
package config
