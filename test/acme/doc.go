//go:build linux

// Package acme holds the test of certificate renewals with a real ACME
// client and server: Debian's certbot against pebble, Let's Encrypt's test
// ACME server, both on the loopback (`make acme-tools` installs them; the
// test skips only when they cannot be had). certbot obtains a certificate,
// the agent runs Envoy on it, and `certbot renew --force-renewal` renews
// it under a load of clients that do not retry: new handshakes must see the
// new serial with no reload and the same Envoy, a connection opened before
// must go on, and no request may fail.
package acme
