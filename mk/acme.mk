# Certificate renewals with real ACME clients and server (test/acme): Debian's certbot and lego
# against pebble, Let's Encrypt's test ACME server, all on the loopback. `make test` runs the
# test; the three packages are installed here when missing (as root, with apt-get); without
# them the test skips and says so.
#   make acme-tools   install Debian's certbot, lego and pebble when missing

.PHONY: acme-tools
acme-tools:
	@command -v certbot >/dev/null && command -v lego >/dev/null && command -v pebble >/dev/null || \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends certbot lego pebble || \
	        { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends certbot lego pebble; }; \
	    else echo "acme-tools: certbot, lego or pebble not installed and cannot install them (not root or no apt-get); test/acme will skip"; fi

test: acme-tools
