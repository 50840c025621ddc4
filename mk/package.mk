# Packages (.deb, .rpm) and the end-to-end tests in a real systemd. Included by the top-level
# Makefile (`-include mk/*.mk`), which provides VERSION, ENVOY_BIN and the `build` and `envoy`
# targets.
#
#   make package   dist/envoy-agent_<ver>-1_<arch>.deb and dist/envoy-agent-<ver>-1.<arch>.rpm
#   make e2e       boots Debian bookworm under systemd-nspawn and tests the .deb (needs root)

DIST      ?= dist
PKG_STAGE ?= .cache/package

.PHONY: package e2e

# The packaged /etc/envoy-agent/config.toml is config.example.toml with the three paths a package
# install uses; everything else (and every comment) stays as documented in the example.
$(PKG_STAGE)/config.toml: config.example.toml
	@mkdir -p $(@D)
	sed -e 's|^\([[:space:]]*binary_path[[:space:]]*=[[:space:]]*\)"[^"]*"|\1"/usr/bin/envoy"|' \
	    -e 's|^\([[:space:]]*config_path[[:space:]]*=[[:space:]]*\)"[^"]*"|\1"/etc/envoy-agent/envoy.yaml"|' \
	    -e 's|^\([[:space:]]*admin_socket[[:space:]]*=[[:space:]]*\)"[^"]*"|\1"$(PKG_ADMIN_SOCKET)"|' \
	    $< > $@.tmp
	@test "$$(grep -c '^[[:space:]]*binary_path[[:space:]]*=[[:space:]]*"/usr/bin/envoy"' $@.tmp)" = 1 && \
	 test "$$(grep -c '^[[:space:]]*config_path[[:space:]]*=[[:space:]]*"/etc/envoy-agent/envoy.yaml"' $@.tmp)" = 1 && \
	 test "$$(grep -c '^[[:space:]]*admin_socket[[:space:]]*=[[:space:]]*"$(PKG_ADMIN_SOCKET)"' $@.tmp)" = 1 || \
	 { echo "$<: expected one binary_path, config_path and admin_socket line to rewrite" >&2; rm -f $@.tmp; exit 1; }
	mv $@.tmp $@

# Envoy's admin socket in the unit's RuntimeDirectory (the agent's run_dir), where only the
# service's user can reach it.
PKG_ADMIN_SOCKET ?= /run/envoy-agent/admin.sock

# The packaged /etc/envoy-agent/envoy.yaml is envoy.example.yaml with its admin socket there.
$(PKG_STAGE)/envoy.yaml: envoy.example.yaml
	@mkdir -p $(@D)
	sed -e 's|\(pipe: { path: \)[^,]*,|\1$(PKG_ADMIN_SOCKET),|' $< > $@.tmp
	@test "$$(grep -c 'pipe: { path: $(PKG_ADMIN_SOCKET), mode: 0600 }' $@.tmp)" = 1 || \
	 { echo "$<: expected one admin pipe line to rewrite" >&2; rm -f $@.tmp; exit 1; }
	mv $@.tmp $@

package: build $(PKG_STAGE)/config.toml $(PKG_STAGE)/envoy.yaml
	@mkdir -p $(DIST)
	rm -f $(DIST)/envoy-agent_*.deb $(DIST)/envoy-agent-*.rpm
	PKG_STAGE=$(PKG_STAGE) go run ./packaging/cmd/mkpkg -config packaging/nfpm.yaml \
	    -version "$(VERSION)" -binary bin/envoy-agent -out $(DIST)

e2e: package envoy
	PKG_STAGE=$(PKG_STAGE) ENVOY_BIN=$(ENVOY_BIN) DIST=$(DIST) test/e2e/run.sh
