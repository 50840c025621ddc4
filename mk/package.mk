# Packages (.deb, .rpm) and the end-to-end tests in a real systemd. Included by the top-level
# Makefile (`-include mk/*.mk`), which provides VERSION, ENVOY_BIN and the `build` and `envoy`
# targets.
#
#   make package   dist/envoy-agent_<ver>-1_<arch>.deb and dist/envoy-agent-<ver>-1.<arch>.rpm
#   make e2e       boots Debian bookworm under systemd-nspawn and tests the .deb (needs root)

DIST      ?= dist
PKG_STAGE ?= .cache/package

.PHONY: package e2e

# The packaged /etc/envoy-agent/config.toml is config.example.toml with the two paths a package
# install uses; everything else (and every comment) stays as documented in the example.
$(PKG_STAGE)/config.toml: config.example.toml
	@mkdir -p $(@D)
	sed -e 's|^\([[:space:]]*binary_path[[:space:]]*=[[:space:]]*\)"[^"]*"|\1"/usr/bin/envoy"|' \
	    -e 's|^\([[:space:]]*config_path[[:space:]]*=[[:space:]]*\)"[^"]*"|\1"/etc/envoy-agent/envoy.yaml"|' \
	    $< > $@.tmp
	@test "$$(grep -c '^[[:space:]]*binary_path[[:space:]]*=[[:space:]]*"/usr/bin/envoy"' $@.tmp)" = 1 && \
	 test "$$(grep -c '^[[:space:]]*config_path[[:space:]]*=[[:space:]]*"/etc/envoy-agent/envoy.yaml"' $@.tmp)" = 1 || \
	 { echo "$<: expected one binary_path and one config_path line to rewrite" >&2; rm -f $@.tmp; exit 1; }
	mv $@.tmp $@

package: build $(PKG_STAGE)/config.toml
	@mkdir -p $(DIST)
	rm -f $(DIST)/envoy-agent_*.deb $(DIST)/envoy-agent-*.rpm
	PKG_STAGE=$(PKG_STAGE) go run ./packaging/cmd/mkpkg -config packaging/nfpm.yaml \
	    -version "$(VERSION)" -binary bin/envoy-agent -out $(DIST)

e2e: package envoy
	PKG_STAGE=$(PKG_STAGE) ENVOY_BIN=$(ENVOY_BIN) DIST=$(DIST) test/e2e/run.sh
