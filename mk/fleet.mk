# The Ansible role (deploy/ansible) on a fleet of three systemd hosts. Included by the top-level
# Makefile (`-include mk/*.mk`), which provides ENVOY_BIN, CACHE and the `envoy` target;
# mk/package.mk provides `package`.
#
#   make fleet   boots three Debian bookworm hosts under systemd-nspawn and rolls the role over
#                them with ansible-playbook, one host installing from the package repository
#                (needs root; see test/fleet/run.sh)

# The Envoy the hosts are installed with first; the test then upgrades them to ENVOY_BIN. Same
# hot-restart version as ENVOY_VERSION's, so the upgrade is a hot restart.
DIST             ?= dist
FLEET_ENVOY_FROM ?= 1.39.3
FLEET_ENVOY_FROM_BIN := $(CACHE)/envoy/$(FLEET_ENVOY_FROM)/envoy

.PHONY: fleet fleet-envoy-from

# The top-level Makefile's download rule, run for the other version (no rule here names the file:
# it would replace that one).
fleet-envoy-from:
	@test -x $(FLEET_ENVOY_FROM_BIN) || $(MAKE) --no-print-directory $(FLEET_ENVOY_FROM_BIN) ENVOY_VERSION=$(FLEET_ENVOY_FROM)

# One host installs from the package repository (mk/repo.mk's tools, the test key): the Envoy
# packages of both releases too (mk/package-envoy.mk's rule for dist/envoy_<ver>-1_amd64.deb).
fleet: package envoy fleet-envoy-from repo-tools $(DIST)/envoy_$(FLEET_ENVOY_FROM)-1_amd64.deb $(DIST)/envoy_$(ENVOY_VERSION)-1_amd64.deb
	PKG_STAGE=$(PKG_STAGE) DIST=$(DIST) BINARY=$(PKG_STAGE)/envoy-agent ENVOY_BIN=$(ENVOY_BIN) ENVOY_BIN_FROM=$(FLEET_ENVOY_FROM_BIN) \
	    GNUPGHOME=$(CACHE)/repo-gnupg test/fleet/run.sh
