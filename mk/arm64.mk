# make test-arm64: the arm64 agent runs the arm64 Envoy on this amd64 machine,
# under qemu-user emulation (binfmt_misc; test/arm64/emulation.sh installs and
# registers what is missing, as root). The real-Envoy tests of cmd/envoy-agent
# are cross-compiled for arm64 (a pure Go build: no -race, which needs cgo) and
# run with the aarch64 Envoy of `make envoy-arm64`; ARM64_TESTS are the ones
# that prove start (READY=1), hot-restart reloads under a load that does not
# retry (0 failed), and a stop that drains a request in flight, plus the one
# that shows each process is the aarch64 program. Emulation is slow (Envoy is
# LIVE in 1.2 s on an idle machine, 8 s on a loaded one; a reload takes 10 to
# 30 s, most of it `envoy --mode validate` and
# `--hot-restart-version`): only the wait for READY=1 is
# raised (a bound, not an assertion); no assertion is loosened. The run fails unless every
# selected test reports PASS.

ARM64_DIR   := $(CACHE)/arm64
# How long a test waits for READY=1 (ENVOY_AGENT_READY_WAIT; 30s natively):
# an emulated Envoy was LIVE in 8s, and not within 30s with the load average at 25.
ARM64_READY_WAIT ?= 120s
ARM64_TESTS ?= TestAgentAndEnvoyRunAsTheTestsArchitecture TestReloadsUnderBusyLoadFailNothing TestStopDrainsWithRequestInFlight
# The aarch64 Envoy with its loader and library path named where Debian's
# libc6-arm64-cross puts them (patchelf on a copy; the code is the wheel's).
# Not QEMU_LD_PREFIX: qemu-user would then rewrite every absolute path the
# emulated agent opens that also exists under the prefix ("/" itself among
# them), and the agent's walk of its files from "/" would start in
# /usr/aarch64-linux-gnu.
ARM64_ENVOY := $(ARM64_DIR)/envoy
ARM64_LIBDIR := /usr/aarch64-linux-gnu/lib

$(ARM64_ENVOY): $(ENVOY_CACHED_ARM64)
	@test/arm64/emulation.sh
	@mkdir -p $(ARM64_DIR)
	cp $< $@.tmp
	patchelf --set-interpreter $(ARM64_LIBDIR)/ld-linux-aarch64.so.1 --set-rpath $(ARM64_LIBDIR) $@.tmp
	mv $@.tmp $@

.PHONY: test-arm64
test-arm64: $(ARM64_ENVOY)
	@test/arm64/emulation.sh
	GOARCH=arm64 CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(ARM64_DIR)/envoy-agent ./cmd/envoy-agent
	GOARCH=arm64 CGO_ENABLED=0 $(GO) test -c -o $(ARM64_DIR)/envoy-agent.test ./cmd/envoy-agent
	@start=$$(date +%s); \
	echo "test-arm64: $$(file -b $(ARM64_DIR)/envoy-agent.test | cut -d, -f1-2); Envoy $(ARM64_ENVOY), hot-restart version $$($(ARM64_ENVOY) --hot-restart-version 2>&1)"; \
	{ cd cmd/envoy-agent && ENVOY_AGENT_BIN=$(ARM64_DIR)/envoy-agent ENVOY_AGENT_READY_WAIT=$(ARM64_READY_WAIT) ENVOY_BIN=$(ARM64_ENVOY) \
		$(ARM64_DIR)/envoy-agent.test -test.count=1 -test.v -test.timeout 15m \
		-test.run '^($(subst $(eval) ,|,$(strip $(ARM64_TESTS))))$$'; echo $$? >$(ARM64_DIR)/test.rc; } 2>&1 | tee $(ARM64_DIR)/test.log; \
	status=$$(cat $(ARM64_DIR)/test.rc); missing=""; \
	for t in $(ARM64_TESTS); do grep -q "^--- PASS: $$t " $(ARM64_DIR)/test.log || missing="$$missing $$t"; done; \
	echo "test-arm64: $$(grep -c '^--- PASS' $(ARM64_DIR)/test.log) passed, $$(grep -c '^--- FAIL' $(ARM64_DIR)/test.log) failed under emulation in $$(( $$(date +%s) - start ))s"; \
	if [ -n "$$missing" ]; then echo "test-arm64: no PASS for:$$missing"; exit 1; fi; \
	exit $$status
