# Packages (.deb, .rpm) and the end-to-end tests in a real systemd. Included by the top-level
# Makefile (`-include mk/*.mk`), which provides VERSION, ENVOY_BIN and the `build` and `envoy`
# targets.
#
#   make package   dist/envoy-agent_<ver>-1_<arch>.deb and dist/envoy-agent-<ver>-1.<arch>.rpm for
#                  each of PKG_ARCHES (amd64 arm64: .deb amd64/arm64, .rpm x86_64/aarch64)
#   make e2e       boots Debian 12, 11 and 13 under systemd-nspawn and tests the .deb (needs root):
#                  every step on 12, the operator's path on 11 and 13 (test/e2e/run.sh says which);
#                  E2E_RELEASES picks releases, E2E_ROOTS where the debootstrapped roots are cached
#   make lint-packages  Debian 12's lintian and rpmlint on both packages

DIST      ?= dist
PKG_STAGE ?= .cache/package

.PHONY: package e2e lint-packages pkg-force

# The architectures `make package` builds, in GOARCH terms; the host's own binary is also at
# $(PKG_STAGE)/envoy-agent (the e2e test and its upgrade packages use it).
PKG_ARCHES  ?= amd64 arm64
ifndef GOHOSTARCH
GOHOSTARCH  := $(shell $(GO) env GOHOSTARCH)
endif

# The packaged binary is a pure Go build (CGO_ENABLED=0: the code imports no C), so it calls
# nothing in glibc and runs on any glibc release: -trimpath (no build paths), a PIE linked by Go's
# own linker, which also gives it a read-only PT_GNU_RELRO segment and, with -bindnow, BIND_NOW
# (what lintian's hardening checks look for), stripped (-s -w), and with the module version
# stamped from git (-buildvcs=true overrides a GOFLAGS=-buildvcs=false; `go version -m` shows it).
# Its only tie to the C library is the dynamic loader that relocates a PIE (PT_INTERP, no
# DT_NEEDED); mkpkg reads that from the binary and makes the package depend on libc6/glibc
# unversioned. A pure Go build cross-compiles: $(PKG_STAGE)/<goarch>/envoy-agent is built with
# GOARCH=<goarch> (rebuilt every time; Go's build cache makes that cheap).
PKG_GOFLAGS  := -trimpath -buildmode=pie -buildvcs=true
PKG_LDFLAGS  := -s -w -bindnow -X main.version=$(VERSION)
$(PKG_STAGE)/%/envoy-agent: pkg-force
	@mkdir -p $(@D)
	CGO_ENABLED=0 GOOS=linux GOARCH=$* $(GO) build $(PKG_GOFLAGS) -ldflags "$(PKG_LDFLAGS)" -o $@ ./cmd/envoy-agent
$(PKG_STAGE)/envoy-agent: $(PKG_STAGE)/$(GOHOSTARCH)/envoy-agent
	cp $< $@

# Man pages, generated from the commands and keys the code declares (service/manual); the date
# is the last commit's, so a rebuild of the same commit gives the same pages.
PKG_DATE ?= $(or $(shell git log -1 --format=%cs 2>/dev/null),1970-01-01)
$(PKG_STAGE)/man: $(PKG_STAGE)/envoy-agent
	$(GO) run ./service/manual/cmd/genman -version "$(VERSION)" -date "$(PKG_DATE)" -gzip -out $@

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

package: $(PKG_STAGE)/envoy-agent $(foreach a,$(PKG_ARCHES),$(PKG_STAGE)/$(a)/envoy-agent) \
	 $(PKG_STAGE)/config.toml $(PKG_STAGE)/man $(PKG_STAGE)/envoy.yaml
	@mkdir -p $(DIST)
	rm -f $(DIST)/envoy-agent_*.deb $(DIST)/envoy-agent-*.rpm
	$(GO) build -o $(PKG_STAGE)/mkpkg ./packaging/cmd/mkpkg
	for a in $(PKG_ARCHES); do \
	    PKG_STAGE=$(PKG_STAGE) $(PKG_STAGE)/mkpkg -config packaging/nfpm.yaml -arch $$a \
	        -version "$(VERSION)" -date "$(PKG_DATE)" -binary $(PKG_STAGE)/$$a/envoy-agent \
	        -changelog CHANGELOG.md -out $(DIST) || exit 1; \
	done

# Debian 12's lintian and rpmlint on the packages; installs both when missing. Errors or warnings
# fail it (lintian's overrides ship in the .deb; rpmlint's filters are
# packaging/rpm/envoy-agent.rpmlintrc, its settings packaging/rpm/rpmlint.toml), except rpmlint's no-signature: the packages are not
# signed here. rpmlint unpacks with `cpio -id`, and nfpm's payload has absolute names, which GNU
# cpio would write into / itself: a wrapper adds --no-absolute-filenames.
# Every architecture's packages (lintian reads an arm64 .deb on amd64: it inspects, never runs).
lint-packages: package
	@command -v lintian >/dev/null && command -v rpmlint >/dev/null || \
	    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q lintian rpmlint; }
	lintian --version
	lintian --fail-on error,warning --display-info $(DIST)/envoy-agent_*.deb
	@mkdir -p $(PKG_STAGE)/cpio-wrap && printf '#!/bin/sh\nexec /usr/bin/cpio --no-absolute-filenames "$$@"\n' \
	    > $(PKG_STAGE)/cpio-wrap/cpio && chmod 0755 $(PKG_STAGE)/cpio-wrap/cpio
	PATH="$(CURDIR)/$(PKG_STAGE)/cpio-wrap:$$PATH" rpmlint -c packaging/rpm/rpmlint.toml -r packaging/rpm/envoy-agent.rpmlintrc \
	    $(DIST)/envoy-agent-*.rpm > $(PKG_STAGE)/rpmlint.out 2>&1; rc=$$?; cat $(PKG_STAGE)/rpmlint.out; \
	    bad=$$(grep -E '^envoy-agent[^ ]*: [EW]: ' $(PKG_STAGE)/rpmlint.out | grep -v ': E: no-signature'); \
	    if [ -n "$$bad" ]; then echo "rpmlint: errors or warnings besides no-signature:"; echo "$$bad"; exit 1; fi; \
	    grep -q 'packages and 0 specfiles checked' $(PKG_STAGE)/rpmlint.out || { echo "rpmlint did not run (exit $$rc)"; exit 1; }

E2E_RELEASES ?= bookworm bullseye trixie
E2E_ROOTS    ?= $(CURDIR)/.cache
e2e: package envoy
	PKG_STAGE=$(PKG_STAGE) ENVOY_BIN=$(ENVOY_BIN) DIST=$(DIST) BINARY=$(PKG_STAGE)/envoy-agent \
	    E2E_RELEASES="$(E2E_RELEASES)" E2E_ROOTS=$(E2E_ROOTS) test/e2e/run.sh
