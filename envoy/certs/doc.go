//go:build linux

// Package certs serves the certificates and keys that an Envoy bootstrap
// names by file as SDS secrets read from files, so that a renewal reaches
// Envoy by itself: new handshakes use the new certificate, connections
// already open go on, and no Envoy process is started.
//
// Rewrite turns every file-named tls_certificates entry and trusted_ca of a
// bootstrap's TLS contexts into an SDS reference (path_config_source) to a
// file in the agent's private run folder. Manager writes those files (0600,
// by atomic rename, which Envoy's file watch picks up), watches the
// operator's files (inotify on their folders, and a slow poll) and writes a
// secret again only once its new pair is whole: a key that does not match
// its certificate, or an empty or unparsable file, is logged once and the
// pair in use goes on serving.
//
// It knows nothing of systemd, TOML or the envoy package; it never logs or
// returns PEM or key material.
package certs
