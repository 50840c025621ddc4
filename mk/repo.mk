# The package repository: a signed apt repository and a signed yum repository made from the
# packages in $(DIST), and its end-to-end test in a booted Debian 12. Included by the top-level
# Makefile (`-include mk/*.mk`); mk/package.mk and mk/package-envoy.mk provide `package`,
# `package-envoy` and the Envoy packages the e2e test needs.
#
#   make repo       $(REPO_DIR) (dist/repo): apt/ (apt-ftparchive; InRelease, Release.gpg) and
#                   yum/ (createrepo_c; repodata/repomd.xml.asc, every .rpm signed) for amd64 and
#                   arm64, the public key and a .sources and a .repo file for hosts
#                   (packaging/repo/mkrepo.sh; docs/packaging.md)
#   make e2e-repo   Debian 12 under systemd-nspawn installs envoy-agent and envoy from the
#                   repository over HTTP and upgrades both with apt-get under load (needs root;
#                   test/e2e/repo.sh)
#
# The signing key: REPO_KEY (an ID, fingerprint or user ID) in GNUPGHOME (default ~/.gnupg) for a
# real one; without REPO_KEY, a test key without a passphrase, made once in $(CACHE)/repo-gnupg.
# REPO_URL is the address the host files name.

REPO_DIR       ?= $(DIST)/repo
REPO_KEY       ?=
REPO_URL       ?= https://repo.example.org/envoy-agent
REPO_GNUPGHOME := $(if $(REPO_KEY),$(or $(GNUPGHOME),$(HOME)/.gnupg),$(CACHE)/repo-gnupg)

.PHONY: repo repo-tools e2e-repo

# apt-ftparchive (apt-utils), createrepo_c (createrepo-c), rpmsign and rpmkeys (rpm), gpg.
repo-tools:
	@command -v apt-ftparchive >/dev/null && command -v createrepo_c >/dev/null && \
	 command -v rpmsign >/dev/null && command -v gpg >/dev/null || \
	    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends apt-utils createrepo-c rpm gpg gpgv; }

# Every envoy-agent and Envoy package in $(DIST), both architectures, into the repository (which
# keeps what it already has: see mkrepo.sh).
repo: package package-envoy repo-tools
	GNUPGHOME=$(REPO_GNUPGHOME) REPO_KEY='$(REPO_KEY)' REPO_TEST_KEY=$(if $(REPO_KEY),0,1) REPO_URL='$(REPO_URL)' \
	    packaging/repo/mkrepo.sh $(REPO_DIR) $$(ls $(DIST)/envoy-agent_*.deb $(DIST)/envoy-agent-*.rpm $(DIST)/envoy_*.deb $(DIST)/envoy-*.rpm)
	@$(if $(REPO_KEY),,GNUPGHOME=$(REPO_GNUPGHOME) gpgconf --kill gpg-agent)

# The e2e test makes its own repositories (with mkrepo.sh and the test key) from the packages
# `make e2e` uses: envoy-agent's from `make package`, Envoy's $(E2E_ENVOY_FROM) and $(ENVOY_VERSION).
e2e-repo: package envoy e2e-envoy-packages repo-tools
	PKG_STAGE=$(PKG_STAGE) DIST=$(DIST) NFPM_CONFIG=packaging/nfpm.yaml GNUPGHOME=$(CACHE)/repo-gnupg \
	    E2E_ENVOY_FROM=$(E2E_ENVOY_FROM) E2E_ENVOY_TO=$(ENVOY_VERSION) E2E_ROOTS=$(E2E_ROOTS) test/e2e/repo.sh
