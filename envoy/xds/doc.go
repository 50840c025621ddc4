// Package xds serves route configurations and secrets to the agent's own
// Envoy over an ADS stream (gRPC, state of the world, v3) on a unix socket,
// instead of from files Envoy watches: a watched file costs Envoy one
// inotify instance, and Linux gives a user 128 by default, so a bootstrap of
// 150 certificates served from files made Envoy abort at its start. Over
// ADS, Envoy watches no file for them, private keys never touch the disk,
// and a rejection carries Envoy's reason (error_detail).
//
// It has three parts: Convert turns a resource written in YAML (a
// RouteConfiguration, a Secret) into its protobuf bytes with descriptors
// embedded in the binary (descriptors.pb.gz, written by ./protoset),
// reading the YAML as Envoy's own loader does or failing; Server answers
// each Envoy process (an epoch, named by the :authority of its gRPC stream)
// from a resource set of its own (and the secrets UpdateSecret gives it,
// every epoch's: the certificates) and tells what it acknowledged, on ADS
// streams and on a secret's own SDS stream alike; and ads.Bootstrap gives
// the pieces of a bootstrap that point Envoy at it. Package ads holds what
// the packages that run Envoy share with it without linking gRPC or
// protobuf.
//
// It knows nothing of systemd, TOML or the envoy package, and never logs or
// returns a resource's content (a secret's key).
package xds
