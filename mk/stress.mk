# make stress: the reload, drain and fault tests, STRESS_RUNS times, while
# stress-ng keeps every core busy (a busy CI machine, or a host with other
# work, is where timing assumptions break). Installs stress-ng with apt-get
# when it is missing. Prints how many runs passed; fails unless all did.

STRESS_RUNS   ?= 3
STRESS_TRIALS ?= 3
STRESS_TESTS  ?= Reload|Drain|Fault|Stop|Sigterm|HotRestart|Quit
STRESS_PKGS   ?= ./envoy ./cmd/envoy-agent
SUDO          := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: stress
stress: envoy
	@command -v stress-ng >/dev/null 2>&1 || { echo "stress: installing stress-ng"; \
		$(SUDO) apt-get update -qq && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng >/dev/null; }
	@$(GO) test -race -count=1 -run '^$$' $(STRESS_PKGS) >/dev/null # build outside the load
	@set -u; cores=$$(nproc); start=$$(date +%s); \
	stress-ng --cpu "$$cores" --timeout 3600s --quiet & load=$$!; \
	trap 'kill $$load 2>/dev/null; wait $$load 2>/dev/null' EXIT INT TERM; \
	sleep 2; echo "stress: $$cores cores kept busy by stress-ng (pid $$load); load average $$(cut -d' ' -f1-3 /proc/loadavg)"; \
	pass=0; \
	for i in $$(seq 1 $(STRESS_RUNS)); do \
		seed=$$(od -An -N4 -tu4 /dev/urandom | tr -d ' '); \
		echo "stress: run $$i, -shuffle=$$seed (replay: go test -race -count=1 -shuffle=$$seed -run '$(STRESS_TESTS)' $(STRESS_PKGS))"; \
		if ENVOY_AGENT_TRIALS=$(STRESS_TRIALS) $(GO) test -race -count=1 -shuffle=$$seed -run '$(STRESS_TESTS)' $(STRESS_PKGS); then \
			pass=$$((pass+1)); fi; \
		echo "stress: run $$i done, load average $$(cut -d' ' -f1-3 /proc/loadavg)"; \
	done; \
	echo "stress: $$pass/$(STRESS_RUNS) runs passed in $$(( $$(date +%s) - start ))s"; \
	test "$$pass" -eq $(STRESS_RUNS)
