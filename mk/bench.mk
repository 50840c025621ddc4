# Benchmarks of the agent against a bare Envoy, with the real Envoy. Included by the top-level
# Makefile (`-include mk/*.mk`), which provides GO, ENVOY_BIN and the `build` and `envoy` targets.
#
#   make bench   builds the agent, runs every scenario (about 4 minutes on 2 cores), prints a
#                markdown table and writes results.md, results.json, reload.svg (and the
#                children's logs) to $(BENCH_OUT)
#
# BENCH_FLAGS passes flags to the program, e.g. BENCH_FLAGS='-scenarios start,growth -starts 20';
# `go run ./bench -h` lists them.

BENCH_OUT   ?= bench-results
BENCH_FLAGS ?=

.PHONY: bench

bench: build envoy
	$(GO) run ./bench -agent bin/envoy-agent -envoy "$(ENVOY_BIN)" -out "$(BENCH_OUT)" $(BENCH_FLAGS)
