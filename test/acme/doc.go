//go:build linux

// Package acme holds the test of certificate renewals with real ACME
// clients and server: Debian's certbot and lego against pebble, Let's
// Encrypt's test ACME server, all on the loopback (`make acme-tools`
// installs them; the test skips only when they cannot be had). The client
// obtains a certificate, the agent runs Envoy on it, and the client renews
// it (`certbot renew --force-renewal`, `lego renew`) under a load of
// clients that do not retry: new handshakes must see the new serial with no
// reload and the same Envoy, a connection opened before must go on, and no
// request may fail.
package acme
