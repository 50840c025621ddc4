#!/bin/sh
# A stand-in for an Envoy of another hot-restart version, packaged as `envoy` for `make e2e` only:
# the releases at hand (1.36.4 to 1.40.0) all have hot-restart version 11.104. It answers
# --hot-restart-version with 99.1 and runs the real Envoy the test put at /var/lib/e2e/envoy
# otherwise.
[ "$1" = --hot-restart-version ] && { echo 99.1 >&2; exit 0; }
exec /var/lib/e2e/envoy "$@"
