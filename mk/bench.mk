# Benchmarks of the agent against a bare Envoy, with the real Envoy. Included by the top-level
# Makefile (`-include mk/*.mk`), which provides GO, ENVOY_BIN and the `build` and `envoy` targets.
#
#   make bench   builds the agent as packaged, runs every scenario (about 5 minutes on 2 cores), prints a
#                markdown table and writes results.md, results.json, reload.svg (and the
#                children's logs) to $(BENCH_OUT); a full run (no BENCH_SCENARIOS, no BENCH_FLAGS)
#                also writes docs/bench-results.md, the figures the documentation links to
#
# BENCH_SCENARIOS picks scenarios, e.g. BENCH_SCENARIOS=scale (a thousand certificates and
# listeners) or BENCH_SCENARIOS=start,inplace. BENCH_FLAGS passes flags to the program, e.g.
# BENCH_FLAGS='-starts 20' or BENCH_FLAGS='-scale-certs 150'; `go run ./bench -h` lists them.

BENCH_OUT       ?= bench-results
BENCH_FLAGS     ?=
BENCH_SCENARIOS ?=
BENCH_ARGS       = $(if $(BENCH_SCENARIOS),-scenarios $(BENCH_SCENARIOS)) $(BENCH_FLAGS)

.PHONY: bench

# It measures the agent as the packages ship it ($(PKG_STAGE)/envoy-agent: pure Go, PIE, stripped;
# mk/package.mk), and builds the start scenario's floor, bench/launcher, the same way.
bench: envoy
	$(MAKE) --no-print-directory $(PKG_STAGE)/envoy-agent
	CGO_ENABLED=0 $(GO) build $(PKG_GOFLAGS) -ldflags "-s -w -bindnow" -o $(PKG_STAGE)/bench-launcher ./bench/launcher
	$(GO) run ./bench -agent $(PKG_STAGE)/envoy-agent -launcher $(PKG_STAGE)/bench-launcher -envoy "$(ENVOY_BIN)" -out "$(BENCH_OUT)" $(BENCH_ARGS)
	@if [ -z "$(strip $(BENCH_ARGS))" ]; then { printf '# Benchmark results\n\nWritten by `make bench` (bench/; the scenarios are described in [testing.md](testing.md#benchmarks)); not edited by hand.\n\n'; \
	    sed 's/^#### /## /' "$(BENCH_OUT)/results.md"; } > docs/bench-results.md; echo "wrote docs/bench-results.md"; fi
