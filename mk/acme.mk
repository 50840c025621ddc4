# Certificate renewals with a real ACME client and server (test/acme): Debian's certbot against
# pebble, Let's Encrypt's test ACME server, both on the loopback. `make test` runs the test;
# the two packages are installed here when missing (as root, with apt-get); without them the
# test skips and says so.
#   make acme-tools   install Debian's certbot and pebble when missing

.PHONY: acme-tools
acme-tools:
	@command -v certbot >/dev/null && command -v pebble >/dev/null || \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends certbot pebble || \
	        { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends certbot pebble; }; \
	    else echo "acme-tools: certbot or pebble not installed and cannot install them (not root or no apt-get); test/acme will skip"; fi

test: acme-tools
