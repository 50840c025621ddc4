//go:build linux

// Package certs serves the certificates and keys that an Envoy bootstrap
// names by file as SDS secrets, from the agent's ADS server (envoy/xds), so
// that a renewal reaches Envoy by itself: new handshakes use the new
// certificate, connections already open go on, and no Envoy process is
// started.
//
// Rewrite (or Edit, on a decoded bootstrap) turns every file-named
// tls_certificates entry and trusted_ca of a bootstrap's TLS contexts into
// an SDS reference read over ADS (a static cluster's, and every one of a
// bootstrap with an ads_config of its own, on a gRPC SDS stream of its
// own). Manager reads the files, converts each pair into the secret Envoy is
// served (with the converter it is given, which this package does not link)
// and hands it to the server, which serves it to every Envoy epoch; it
// watches the operator's files (inotify on their folders, and a slow poll)
// and serves a secret again only once its new pair is whole: a key that does
// not match its certificate, or an empty or unparsable file, is logged once
// and the pair in use goes on serving, and so is a pair Envoy rejects (with
// Envoy's reason). No key is written to disk.
//
// The files are read through internal/safefile (a regular file on a file
// system that keeps data, bounded in size and time) with no lock held, so
// that a file a local user points a link at (/proc/kmsg, a hung mount) can
// hold neither status nor a reload nor a stop. The folders watched are a
// file's own, its link target's and those of the links on the way: as many
// whatever the depth of the folders above it.
//
// It knows nothing of systemd, TOML or the envoy package; it never logs or
// returns PEM or key material, nor anything a key file holds (not even its
// PEM block types), and what it shows of a certificate (subject, DNS names)
// has its control characters escaped (internal/printable).
package certs
