# The Ansible role (deploy/ansible) on a fleet of three systemd hosts. Included by the top-level
# Makefile (`-include mk/*.mk`), which provides ENVOY_BIN, CACHE and the `envoy` target;
# mk/package.mk provides `package`.
#
#   make fleet   boots three Debian bookworm hosts under systemd-nspawn and rolls the role over
#                them with ansible-playbook (needs root; see test/fleet/run.sh)

# The Envoy the hosts are installed with first; the test then upgrades them to ENVOY_BIN. Same
# hot-restart version as ENVOY_VERSION's, so the upgrade is a hot restart.
FLEET_ENVOY_FROM ?= 1.39.3
FLEET_ENVOY_FROM_BIN := $(CACHE)/envoy/$(FLEET_ENVOY_FROM)/envoy

.PHONY: fleet fleet-envoy-from

# The top-level Makefile's download rule, run for the other version (no rule here names the file:
# it would replace that one).
fleet-envoy-from:
	@test -x $(FLEET_ENVOY_FROM_BIN) || $(MAKE) --no-print-directory $(FLEET_ENVOY_FROM_BIN) ENVOY_VERSION=$(FLEET_ENVOY_FROM)

fleet: package envoy fleet-envoy-from
	PKG_STAGE=$(PKG_STAGE) DIST=$(DIST) BINARY=$(PKG_STAGE)/envoy-agent ENVOY_BIN=$(ENVOY_BIN) ENVOY_BIN_FROM=$(FLEET_ENVOY_FROM_BIN) \
	    test/fleet/run.sh
