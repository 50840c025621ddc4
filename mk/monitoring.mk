# The monitoring shipped in the package (monitoring/): `make test` checks and unit-tests its
# Prometheus rules with promtool, and runs the live check (a real Prometheus scraping a real agent)
# under root. Both come from Debian's `prometheus` package, installed here when missing (as root;
# --no-install-recommends: promtool and prometheus only, no exporters).
#   make promtool   install Debian's prometheus package when promtool is missing

.PHONY: promtool
promtool:
	@command -v promtool >/dev/null && command -v prometheus >/dev/null || \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus || \
	        { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus; }; \
	    else echo "promtool: not installed and cannot install it (not root or no apt-get); the monitoring tests will skip"; fi

test: promtool
