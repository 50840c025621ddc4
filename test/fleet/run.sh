#!/usr/bin/env bash
# The Ansible role deploy/ansible/roles/envoy_agent on a fleet of three hosts (`make fleet`).
#
# Boots three Debian bookworm hosts with systemd as PID 1 under systemd-nspawn, each with its
# own network namespace (--private-network) and a volatile overlay over a cached rootfs (the
# e2e one plus python3 for Ansible's modules), and drives them with ansible-playbook from this
# host through the community.docker.nsenter connection (each host's PID 1 as
# ansible_nsenter_pid). Load runs inside every host (test/fleet/load.py: a new connection per
# request, no retries) while the playbook rolls out:
#   install from scratch; a config change (0 failed requests, hosts switched one after the
#   other); a broken bootstrap (validate stops it on the first host, nothing changes anywhere);
#   a change that fails at run time on the second host (its files put back, a restart there serves
#   the old configuration; after the fix a re-run converges, and the run after changes nothing);
#   a change the reload guard rolls back on the first host (the rollout stops there);
#   an Envoy binary upgrade (hot restart, 0 failed requests); an agent package upgrade (the
#   failed requests are reported); a second run that changes nothing; check mode (each host's
#   diff and reload plan).
# One host (REPO_HOST) installs from the package repository instead (`make repo`'s mkrepo.sh,
# served over HTTP on that host's loopback, the role's envoy_agent_repo_url and _repo_key): Envoy
# as a package too, and its upgrades are the newer packages published into the repository.
#
# Prints one "PASS|FAIL <step>" line per step and ends with "N passed, N failed"; exits non-zero
# on any failure. Needs root. Inputs (environment, all optional):
#   DIST              directory with the .deb from `make package` (dist)
#   PKG_STAGE         directory with the generated config.toml, for the upgrade package
#   ENVOY_BIN         the Envoy the hosts end up running (the upgrade's target)
#   ENVOY_BIN_FROM    the Envoy installed first (same hot-restart version); empty: no Envoy upgrade step
#   BINARY            the envoy-agent binary for the upgrade package (bin/envoy-agent)
#   ANSIBLE_VENV      virtualenv with ansible (.cache/ansible-venv; created when missing)
#   FLEET_ROOTFS      cached rootfs (.cache/rootfs-bookworm-fleet); built when missing or stale,
#                     from E2E_ROOTFS (.cache/rootfs-bookworm) when it is there, else debootstrap
#   GNUPGHOME         keyring of the repository's signing key (.cache/repo-gnupg; a test key is
#                     made there)
#   FLEET_KEEP=1      keep the work directory (logs, playbook output) afterwards
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo" || exit 1
DIST=${DIST:-dist}
PKG_STAGE=${PKG_STAGE:-.cache/package}
ENVOY_BIN=${ENVOY_BIN:-$(command -v envoy)}
ENVOY_BIN_FROM=${ENVOY_BIN_FROM:-}
BINARY=${BINARY:-${PKG_STAGE:-.cache/package}/envoy-agent}
VENV=${ANSIBLE_VENV:-$repo/.cache/ansible-venv}
ANSIBLE_PIN=ansible==12.3.0
BASE_ROOTFS=${E2E_ROOTFS:-$repo/.cache/rootfs-bookworm}
BASE_INCLUDE=systemd,systemd-sysv,dbus,procps,curl
ROOTFS=${FLEET_ROOTFS:-$repo/.cache/rootfs-bookworm-fleet}
# python3 for Ansible's modules, python3-apt for its apt and package_facts modules.
FLEET_PACKAGES="python3 python3-apt"
HOSTS=(fleet-1 fleet-2 fleet-3)
# The host that installs from the package repository, served on its loopback at REPO_PORT.
REPO_HOST=fleet-3
REPO_PORT=8080
export GNUPGHOME=${GNUPGHOME:-$repo/.cache/repo-gnupg}
URL=http://127.0.0.1:80/
HEADER=x-config-version
# Bounds: one playbook run over the three hosts, and the whole script.
PLAYBOOK_TIMEOUT=420
SCRIPT_TIMEOUT=2400

passed=0
failed=0
work=$(mktemp -d /tmp/envoy-agent-fleet.XXXXXX)
share=$work/share # bound read-only at /mnt/fleet in every host
mkdir -p "$share"
declare -A nspawn_pid ct # host name -> systemd-nspawn's pid, the host's PID 1 as seen from here

# --- reporting ---------------------------------------------------------------------------------

REPORT_TAIL=60
# shellcheck source=test/lib/steps.sh
. "$repo/test/lib/steps.sh"

# --- the hosts -------------------------------------------------------------------------------

# on HOST CMD...: run CMD inside HOST, bounded by $T seconds (default 60).
on() {
	local h=$1
	shift
	timeout --kill-after=5 "${T:-60}" nsenter --target "${ct[$h]}" --mount --uts --ipc --net --pid --cgroup -- "$@"
}

on_sh() {
	on "$1" /bin/sh -c "$2"
}

host_tools() {
	local missing=()
	command -v systemd-nspawn >/dev/null || missing+=(systemd-container)
	command -v debootstrap >/dev/null || missing+=(debootstrap)
	if [ ${#missing[@]} -gt 0 ]; then
		timeout 300 apt-get update -q && DEBIAN_FRONTEND=noninteractive timeout 300 apt-get install -y -q --no-install-recommends "${missing[@]}" || return 1
	fi
	if [ "$("$VENV/bin/pip" show ansible 2>/dev/null | sed -n 's/^Version: //p')" != "${ANSIBLE_PIN#*==}" ]; then
		timeout 600 python3 -m venv "$VENV" && timeout 600 "$VENV/bin/pip" install -q "$ANSIBLE_PIN" || return 1
	fi
	echo "detail: $("$VENV/bin/ansible-playbook" --version | head -n1)"
}

# The fleet rootfs: the e2e rootfs plus FLEET_PACKAGES, installed with apt in a container that
# shares this host's network. The marker records what it was built from, so a change rebuilds it.
ensure_rootfs() {
	local want="$BASE_INCLUDE + $FLEET_PACKAGES"
	if [ "$(cat "$ROOTFS/.fleet-rootfs" 2>/dev/null)" = "$want" ]; then
		echo "detail: cached $ROOTFS"
		return 0
	fi
	local start=$SECONDS
	rm -rf "$ROOTFS.tmp"
	mkdir -p "$(dirname "$ROOTFS")"
	if [ "$(cat "$BASE_ROOTFS/.e2e-rootfs-include" 2>/dev/null)" = "$BASE_INCLUDE" ]; then
		cp -a "$BASE_ROOTFS" "$ROOTFS.tmp" || return 1
		echo "detail: copied $BASE_ROOTFS"
	else
		timeout 900 debootstrap --variant=minbase --include="$BASE_INCLUDE" bookworm "$ROOTFS.tmp" \
			>"$work/debootstrap.log" 2>&1 || { tail -n 20 "$work/debootstrap.log"; return 1; }
		echo "detail: debootstrap"
	fi
	timeout 600 systemd-nspawn -q -D "$ROOTFS.tmp" --register=no --keep-unit --pipe /bin/sh -c "
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -q && apt-get install -y -q --no-install-recommends $FLEET_PACKAGES && apt-get clean
		rm -rf /var/lib/apt/lists/*" </dev/null >"$work/apt.log" 2>&1 || { tail -n 20 "$work/apt.log"; return 1; }
	echo "$want" >"$ROOTFS.tmp/.fleet-rootfs"
	rm -rf "$ROOTFS" && mv "$ROOTFS.tmp" "$ROOTFS"
	echo "detail: $FLEET_PACKAGES installed, $((SECONDS - start))s"
}

boot_one() {
	local h=$1
	SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1 systemd-nspawn -D "$ROOTFS" --boot --register=no --keep-unit \
		--volatile=overlay --private-network --machine="$h-$$" --hostname="$h" \
		--bind-ro="$share:/mnt/fleet" >"$work/$h.console.log" 2>&1 </dev/null &
	nspawn_pid[$h]=$!
	echo "${nspawn_pid[$h]}" >>"$work/nspawn.pids"
}

running() { # running HOST: systemd in HOST says running (or degraded)
	local s
	s=$(T=10 on "$1" systemctl is-system-running)
	[ "$s" = running ] || [ "$s" = degraded ]
}

boot() {
	local h start=$SECONDS
	for h in "${HOSTS[@]}"; do boot_one "$h"; done
	for h in "${HOSTS[@]}"; do
		wait_for 30 pgrep -P "${nspawn_pid[$h]}" || { echo "$h: no PID 1"; return 1; }
		ct[$h]=$(pgrep -P "${nspawn_pid[$h]}" | head -n1)
	done
	for h in "${HOSTS[@]}"; do
		wait_for 60 running "$h" || { echo "$h: systemd is $(T=10 on "$h" systemctl is-system-running)"; return 1; }
		[ "$(on "$h" ps -o comm= -p 1)" = systemd ] || { echo "$h: PID 1 is not systemd"; return 1; }
	done
	# Each host its own network namespace: no two share one, none is this one's.
	local nets
	nets=$(for h in "${HOSTS[@]}" 1; do readlink "/proc/${ct[$h]:-self}/ns/net"; done | sort -u | wc -l)
	[ "$nets" = 4 ] || { echo "network namespaces not distinct"; return 1; }
	echo "detail: ${#HOSTS[@]} hosts up in $((SECONDS - start))s, PID 1s ${ct[*]}"
	write_inventory
}

write_inventory() {
	{
		echo "[envoy_agent]"
		for h in "${HOSTS[@]}"; do
			echo "$h ansible_nsenter_pid=${ct[$h]}$([ "$h" = "$REPO_HOST" ] && echo " fleet_repo_url=http://127.0.0.1:$REPO_PORT/apt")"
		done
		echo
		echo "[envoy_agent:vars]"
		echo "ansible_connection=community.docker.nsenter"
		echo "ansible_python_interpreter=/usr/bin/python3"
		# nsenter is root already (there is no sudo in the hosts).
		echo "ansible_become=false"
	} >"$work/inventory.ini"
}

cleanup() {
	local p
	for p in $(cat "$work/bg.pids" 2>/dev/null); do kill "$p" 2>/dev/null; done
	for p in $(cat "$work/nspawn.pids" 2>/dev/null); do kill -TERM "$p" 2>/dev/null; done # powers off
	for p in $(cat "$work/nspawn.pids" 2>/dev/null); do
		for _ in $(seq 100); do
			kill -0 "$p" 2>/dev/null || break
			sleep 0.2
		done
		kill -KILL "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	gpgconf --kill gpg-agent 2>/dev/null # the one mkrepo.sh's signing started
	if [ "${FLEET_KEEP:-0}" = 1 ]; then echo "logs kept in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'echo "FAIL interrupted"; echo "$passed passed, $((failed + 1)) failed"; exit 130' INT TERM
# The whole run is bounded: past SCRIPT_TIMEOUT, this shell is told to stop (and cleans up).
(sleep "$SCRIPT_TIMEOUT" && echo "FAIL timed out after ${SCRIPT_TIMEOUT}s" && kill -TERM $$) 2>/dev/null &
echo $! >>"$work/bg.pids"

# --- the playbook ----------------------------------------------------------------------------

# The variables every run uses; a run adds its own with -e.
write_vars() {
	cat >"$work/vars.yml" <<-VARS
		envoy_agent_deb: $share/envoy-agent.deb
		# REPO_HOST (its inventory sets fleet_repo_url): both packages from the repository.
		envoy_agent_envoy_source: "{{ 'package' if fleet_repo_url is defined else 'binary' }}"
		envoy_agent_repo_url: "{{ fleet_repo_url | default('') }}"
		envoy_agent_repo_key: $work/repo/envoy-agent-archive-keyring.gpg
		envoy_agent_envoy_binary_src: $share/envoy-first
		envoy_agent_listen_port: 80
		envoy_agent_example_body: ok
		envoy_agent_version_header: $HEADER
		# Short drains, so a package upgrade's restart is quick.
		envoy_agent_envoy: { drain_duration: "3s", parent_shutdown_duration: "6s" }
		envoy_agent_agent: { termination_drain_duration: "3s", min_drain_duration: "1s", exit_on_zero_active_connections: true }
		envoy_agent_ready_timeout: 60
	VARS
}

# playbook NAME [ARGS...]: run site.yml over the fleet; output in $work/NAME.play, the recap line
# of each host in $work/NAME.recap. Returns ansible-playbook's status.
playbook() {
	local name=$1 rc start=$SECONDS
	shift
	ANSIBLE_CONFIG=$repo/deploy/ansible/ansible.cfg ANSIBLE_FORCE_COLOR=0 ANSIBLE_NOCOLOR=1 \
		ANSIBLE_LOCAL_TEMP=$work/ansible-tmp ANSIBLE_HOME=$work/ansible-home \
		timeout --kill-after=10 "$PLAYBOOK_TIMEOUT" "$VENV/bin/ansible-playbook" -i "$work/inventory.ini" \
		"$repo/deploy/ansible/site.yml" -e "@$work/vars.yml" "$@" >"$work/$name.play" 2>&1
	rc=$?
	sed -n '/^PLAY RECAP/,$p' "$work/$name.play" | grep -E '^fleet-[0-9]+ +:' >"$work/$name.recap"
	echo "detail: playbook exit $rc in $((SECONDS - start))s"
	return $rc
}

# recap NAME HOST FIELD: FIELD (ok, changed, failed, ...) of HOST's recap line; empty if HOST
# is not in the recap (the play never reached it).
recap() {
	grep -E "^$2 " "$work/$1.recap" | grep -oE "$3=[0-9]+" | cut -d= -f2
}

show_play() { # show_play NAME: the end of a playbook's output, for a failure
	grep -vE '^\s*$' "$work/$1.play" | tail -n 40
}

# answer HOST: "CODE VERSION" of one request inside HOST.
answer() {
	on "$1" curl -sS --max-time 10 -o /dev/null -D - -w '%{http_code}\n' "$URL" |
		awk -v h="$HEADER" 'tolower($1) == tolower(h) ":" {v = $2} /^[0-9]+$/ {c = $1} END {gsub(/\r/, "", v); print c, v}'
}

expect_version() { # expect_version V: every host answers 200 with version V
	local h got
	for h in "${HOSTS[@]}"; do
		got=$(answer "$h")
		[ "$got" = "200 $1" ] || fail "$h answered \"$got\", want \"200 $1\""
	done
}

# --- load ------------------------------------------------------------------------------------

load_start() { # load_start NAME: load.py inside every host
	local h
	for h in "${HOSTS[@]}"; do
		T=600 on "$h" python3 /mnt/fleet/load.py "$URL" "$HEADER" "/run/fleet-$1.stop" "/run/fleet-$1.json" \
			>"$work/$h.$1.load.log" 2>&1 &
		echo $! >>"$work/bg.pids"
	done
	for h in "${HOSTS[@]}"; do
		wait_for 20 load_sent "$h" "$1" || fail "$h: the load did not start"
	done
}

load_sent() { # load_sent HOST NAME: the load has sent a request
	on "$1" python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["total"] < 1)' "/run/fleet-$2.json"
}

load_done() {
	on "$1" python3 -c 'import json,sys; sys.exit(not json.load(open(sys.argv[1]))["done"])' "/run/fleet-$2.json"
}

# load_stop NAME: stop the load on every host, copy the summaries to $work/HOST.NAME.json.
load_stop() {
	local h
	for h in "${HOSTS[@]}"; do on "$h" touch "/run/fleet-$1.stop"; done
	for h in "${HOSTS[@]}"; do
		wait_for 20 load_done "$h" "$1" || fail "$h: the load did not stop"
		on "$h" cat "/run/fleet-$1.json" >"$work/$h.$1.json" || fail "$h: no load summary"
	done
}

# load_report NAME: one detail line per host (requests, failures, versions seen); prints the total
# failed count on the last line.
load_report() {
	python3 - "$work" "$1" "${HOSTS[@]}" <<-'PY'
		import json, sys
		work, name, hosts = sys.argv[1], sys.argv[2], sys.argv[3:]
		bad = 0
		for h in hosts:
		    s = json.load(open(f"{work}/{h}.{name}.json"))
		    bad += s["failed"]
		    vs = ", ".join(f"v{v} x{d['count']}" for v, d in sorted(s["versions"].items(), key=lambda kv: kv[1]["first"]))
		    errs = "; ".join(f"{k} x{n}" for k, n in s["errors"].items())
		    print(f"detail: {h} {s['total']} requests, {s['failed']} failed{' (' + errs + ')' if errs else ''}, {vs}")
		print(bad)
	PY
}

# rolled_in_order NAME OLD NEW: every host saw OLD then NEW, and each host still answered OLD
# after the previous host had switched to NEW (the hosts switched one batch at a time).
rolled_in_order() {
	python3 - "$work" "$1" "$2" "$3" "${HOSTS[@]}" <<-'PY'
		import json, sys
		work, name, old, new, hosts = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
		s = {h: json.load(open(f"{work}/{h}.{name}.json"))["versions"] for h in hosts}
		ok = True
		for h in hosts:
		    if old not in s[h] or new not in s[h]:
		        print(f"{h} did not see both {old} and {new}: {sorted(s[h])}"); ok = False
		if ok:
		    for a, b in zip(hosts, hosts[1:]):
		        # b must still have been serving the old version after a served the new one.
		        if not s[b][old]["last"] > s[a][new]["first"]:
		            print(f"{b} switched to {new} before {a} did"); ok = False
		        else:
		            print(f"detail: {b} still on v{old} {s[b][old]['last'] - s[a][new]['first']:.1f}s after {a} served v{new}")
		sys.exit(0 if ok else 1)
	PY
}

# --- steps -----------------------------------------------------------------------------------

prepare_share() {
	local deb arch
	# `make package` builds every architecture; the hosts run this machine's.
	arch=$(dpkg --print-architecture)
	deb=$(ls -t "$DIST"/envoy-agent_*_"$arch".deb 2>/dev/null | head -n1)
	[ -n "$deb" ] || { echo "no $arch .deb in $DIST (run make package)"; return 1; }
	[ -x "$ENVOY_BIN" ] || { echo "no Envoy binary at $ENVOY_BIN (run make envoy)"; return 1; }
	cp "$deb" "$share/envoy-agent.deb" && cp test/fleet/load.py "$share/load.py" || return 1
	cp "${ENVOY_BIN_FROM:-$ENVOY_BIN}" "$share/envoy-first" && cp "$ENVOY_BIN" "$share/envoy-last" || return 1
	version=$(dpkg-deb -f "$deb" Version)
	upversion="${version%-*}.1"
	mkdir -p "$work/upgrade"
	PKG_STAGE=$PKG_STAGE timeout 300 go run ./packaging/cmd/mkpkg -config packaging/nfpm.yaml \
		-version "$upversion" -binary "$BINARY" -out "$work/upgrade" || return 1
	cp "$work"/upgrade/envoy-agent_*.deb "$share/envoy-agent-upgrade.deb" || return 1
	envoy_from=$(envoy_version "$share/envoy-first")
	envoy_to=$(envoy_version "$share/envoy-last")
	# REPO_HOST's: the packages of both Envoy releases, the repository with this envoy-agent and
	# the first Envoy.
	envoy_deb_from=$DIST/envoy_${envoy_from}-1_$arch.deb
	envoy_deb_to=$DIST/envoy_${envoy_to}-1_$arch.deb
	[ -f "$envoy_deb_from" ] && [ -f "$envoy_deb_to" ] ||
		{ echo "no Envoy $envoy_from or $envoy_to .deb in $DIST (make package-envoy ENVOY_VERSION=...)"; return 1; }
	publish "$deb" "$envoy_deb_from" || return 1
	write_vars
	echo "detail: $(basename "$deb"), upgrade to $upversion, Envoy $envoy_from then $envoy_to; $REPO_HOST from the repository"
}

# publish PACKAGE...: into the repository REPO_HOST installs from (packaging/repo/mkrepo.sh).
publish() {
	REPO_TEST_KEY=1 timeout 120 "$repo/packaging/repo/mkrepo.sh" "$work/repo" "$@" >"$work/mkrepo.log" 2>&1 ||
		{ cat "$work/mkrepo.log"; return 1; }
}

# serve_repo: the repository over HTTP on REPO_HOST's loopback (this host's Python in its network
# namespace). REPO_HOST has no network: Debian's sources go, so that apt fetches ours only.
serve_repo() {
	nsenter --target "${ct[$REPO_HOST]}" --net -- /usr/bin/python3 -m http.server "$REPO_PORT" --bind 127.0.0.1 \
		--directory "$work/repo" >"$work/http.log" 2>&1 </dev/null &
	echo $! >>"$work/bg.pids"
	wait_for 10 on "$REPO_HOST" curl -sf -o /dev/null "http://127.0.0.1:$REPO_PORT/apt/dists/stable/InRelease" ||
		{ cat "$work/http.log"; return 1; }
	on_sh "$REPO_HOST" 'rm -f /etc/apt/sources.list /etc/apt/sources.list.d/debian.sources'
}

# from_repo WHAT: REPO_HOST fetched WHAT (a file name's start) from the repository (apt quotes a
# "+" in a version as %2b).
from_repo() {
	grep -iF "\"GET /apt/pool/main/${1//+/%2b}" "$work/http.log" | grep -E '" 200 ' | tail -n 1
}

envoy_version() {
	"$1" --version 2>&1 | sed -n 's|.*version: [0-9a-f]*/\([^/]*\)/.*|\1|p'
}

install() {
	playbook install -e envoy_agent_config_version=1 || { show_play install; return 1; }
	local h
	for h in "${HOSTS[@]}"; do
		[ "$(recap install "$h" changed)" -gt 0 ] || fail "$h: nothing changed on a fresh host"
		[ "$(on "$h" systemctl is-enabled envoy-agent)" = enabled ] || fail "$h: unit not enabled"
		[ "$(on "$h" systemctl is-active envoy-agent)" = active ] || fail "$h: unit not active"
		[ "$(on "$h" curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:15020/healthz/ready)" = 200 ] ||
			fail "$h: /healthz/ready is not 200"
	done
	expect_version 1
	echo "detail: $(on fleet-1 dpkg-query -W -f '${Version}' envoy-agent), $(on fleet-1 systemctl show -p StatusText --value envoy-agent)"
	on "$REPO_HOST" grep -q "^Signed-By: /etc/apt/keyrings/envoy-agent-archive-keyring.gpg" /etc/apt/sources.list.d/envoy-agent.sources ||
		fail "$REPO_HOST: no envoy-agent.sources with Signed-By"
	from_repo envoy-agent_ | grep . && from_repo "envoy_$envoy_from" | grep . ||
		fail "$REPO_HOST did not install envoy-agent and envoy $envoy_from from the repository"
	echo "detail: $REPO_HOST from the repository: $(on "$REPO_HOST" dpkg-query -W -f '${Package} ${Version} ' envoy-agent envoy)"
}

config_change() {
	load_start config
	playbook config -e envoy_agent_config_version=2
	local rc=$?
	load_stop config
	local bad
	bad=$(load_report config | tee "$work/config.report" | tail -n1)
	grep '^detail' "$work/config.report"
	[ $rc -eq 0 ] || { show_play config; fail "the playbook failed"; }
	rolled_in_order config 1 2 || fail "the hosts did not switch one after the other"
	expect_version 2
	[ "$bad" -eq 0 ] || fail "$bad requests failed"
}

# The live files' checksums, the agent's PID and reload count on HOST.
host_state() {
	on_sh "$1" 'sha256sum /etc/envoy-agent/config.toml /etc/envoy-agent/envoy.yaml
		systemctl show -p MainPID envoy-agent
		curl -s http://127.0.0.1:15090/stats/prometheus | grep -E "^envoy_agent_(reloads_total|envoy_epoch) "'
}

broken_config() {
	local h
	for h in "${HOSTS[@]}"; do host_state "$h" >"$work/$h.before" || return 1; done
	load_start broken
	playbook broken -e envoy_agent_config_version=3 -e "envoy_agent_bootstrap_template=$repo/test/fleet/broken.yaml.j2"
	local rc=$?
	load_stop broken
	local bad
	bad=$(load_report broken | tee "$work/broken.report" | tail -n1)
	grep '^detail' "$work/broken.report"
	[ $rc -ne 0 ] || fail "the playbook succeeded with a broken bootstrap"
	# Stopped by the validation, on the first host.
	local failed_task
	failed_task=$(awk '/^TASK \[/ {t = $0} /^fatal: \[fleet-1\]/ {print t; exit}' "$work/broken.play" |
		sed 's/^TASK \[\(.*\)\] \**$/\1/')
	echo "detail: fleet-1 failed at \"$failed_task\"; $(grep -oE "unknown cluster 'does-not-exist'" "$work/broken.play" | head -n1)"
	[ "$failed_task" = "envoy_agent : Candidate config.toml, validated with the candidate bootstrap" ] ||
		{ show_play broken; fail "fleet-1 did not fail at the validation"; }
	grep -q 'does-not-exist' "$work/broken.play" || fail "the failure does not name the bad cluster"
	for h in fleet-2 fleet-3; do
		! grep -qE "^(ok|changed|fatal|skipping): \[$h\]" "$work/broken.play" || fail "the play ran tasks on $h"
	done
	for h in "${HOSTS[@]}"; do
		host_state "$h" >"$work/$h.after"
		diff "$work/$h.before" "$work/$h.after" || fail "$h changed: live files, agent or reload count"
	done
	expect_version 2
	[ "$bad" -eq 0 ] || fail "$bad requests failed"
}

# The rollout of a change that validates but fails at run time on one host: a new listener on a
# port another process holds on FAIL_HOST, the second host, so that the first host has taken the
# change before. Envoy refuses the listener and the agent keeps the configuration it served; the
# rollout stops at FAIL_HOST, and the role puts the files that host's Envoy serves back before it
# fails the host: a restart (or a reboot) there serves what served before. 0 failed requests on
# every host, the third host untouched.
FAIL_HOST=fleet-2
reload_fails() {
	local h
	for h in "$FAIL_HOST" fleet-3; do host_state "$h" >"$work/$h.before" || return 1; done
	T=30 on "$FAIL_HOST" systemd-run --unit fleet-port-81 python3 -c \
		'import socket, time; s = socket.socket(); s.bind(("127.0.0.1", 81)); s.listen(); time.sleep(3600)' || return 1
	wait_for 20 on "$FAIL_HOST" python3 -c 'import socket; socket.create_connection(("127.0.0.1", 81), 1)' || fail "port 81 not held"
	load_start runtime
	playbook runtime -e envoy_agent_config_version=3 -e "envoy_agent_bootstrap_template=$repo/test/fleet/port-taken.yaml.j2"
	local rc=$?
	load_stop runtime
	local bad
	bad=$(load_report runtime | tee "$work/runtime.report" | tail -n1)
	grep '^detail' "$work/runtime.report"
	[ $rc -ne 0 ] || fail "the playbook succeeded with a port taken on $FAIL_HOST"
	local failed_task
	failed_task=$(awk '/^(RUNNING HANDLER|TASK) \[/ {t = $0} /^fatal: \['"$FAIL_HOST"'\]/ {print t; exit}' "$work/runtime.play" |
		sed 's/^[A-Z ]* \[\(.*\)\] \**$/\1/')
	echo "detail: $FAIL_HOST failed at \"$failed_task\": $(grep -m1 -oE 'last reload failed: .*' "$work/runtime.play" | cut -c1-160)"
	[ "$failed_task" = "envoy_agent : The reload failed" ] || { show_play runtime; fail "$FAIL_HOST did not fail at the reload"; }
	# The handler's message: the agent's STATUS= with the reason (not the handler's source, which
	# Ansible also prints and which has no "last reload failed"), after `envoy-agent reload
	# --wait`, which the role uses when the installed agent has it, or `systemctl reload`.
	grep -qE '(systemctl reload|envoy-agent reload --wait) failed; envoy-agent: .*last reload failed: .*in use' "$work/runtime.play" ||
		{ show_play runtime; fail "the failure does not give the agent's reason"; }
	grep -q "the files its Envoy serves were put back" "$work/runtime.play" || { show_play runtime; fail "the failure does not say the files were put back"; }
	[ "$(recap runtime fleet-1 failed)" = 0 ] && [ "$(answer fleet-1)" = "200 3" ] || fail "fleet-1 did not take the change: $(answer fleet-1)"
	! grep -qE "^(ok|changed|fatal|skipping): \[fleet-3\]" "$work/runtime.play" || fail "the play ran tasks on fleet-3"
	for h in "$FAIL_HOST" fleet-3; do
		host_state "$h" >"$work/$h.after"
		diff "$work/$h.before" "$work/$h.after" || fail "$h changed: live files, agent or reload count"
	done
	[ "$(on "$FAIL_HOST" systemctl is-active envoy-agent)" = active ] || fail "$FAIL_HOST's unit is not active"
	[ "$(answer "$FAIL_HOST")" = "200 2" ] || fail "$FAIL_HOST answered \"$(answer "$FAIL_HOST")\", want \"200 2\""
	files_state "$FAIL_HOST" in_sync
	[ "$bad" -eq 0 ] || fail "$bad requests failed"
	# Before the fix, a restart of that host serves what served before (its files are those).
	T=120 on "$FAIL_HOST" systemctl restart envoy-agent || fail "systemctl restart on $FAIL_HOST failed: $(on "$FAIL_HOST" systemctl status envoy-agent | tail -n 5)"
	wait_for 60 ready "$FAIL_HOST" || fail "$FAIL_HOST not ready after the restart"
	[ "$(answer "$FAIL_HOST")" = "200 2" ] || fail "after a restart $FAIL_HOST answered \"$(answer "$FAIL_HOST")\", want \"200 2\""
	echo "detail: $FAIL_HOST restarted before the fix: serving v2, files $(files_state "$FAIL_HOST" in_sync)"
}

ready() { [ "$(on "$1" curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:15020/healthz/ready)" = 200 ]; }

# files_state HOST WANT: `envoy-agent status --json` on HOST says its files are WANT (in_sync,
# differ) against what its Envoy serves; prints it.
files_state() {
	local got
	got=$(on "$1" envoy-agent status --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["files"]["state"])')
	[ "$got" = "$2" ] || fail "$1: status says the files are \"$got\", want $2: $(on "$1" envoy-agent status | grep -E 'files|last reload')"
	echo "$got"
}

# The port freed, the same change rolled out again converges: FAIL_HOST and fleet-3 take it (the
# first host has it already) with 0 failed requests, and a run after changes nothing.
fixed_rerun() {
	T=30 on "$FAIL_HOST" systemctl stop fleet-port-81
	load_start fixed
	playbook fixed -e envoy_agent_config_version=3 -e "envoy_agent_bootstrap_template=$repo/test/fleet/port-taken.yaml.j2"
	local rc=$?
	load_stop fixed
	local bad h
	bad=$(load_report fixed | tee "$work/fixed.report" | tail -n1)
	grep '^detail' "$work/fixed.report"
	[ $rc -eq 0 ] || { show_play fixed; fail "the playbook failed"; }
	expect_version 3
	echo "detail: changed fleet-1=$(recap fixed fleet-1 changed) $FAIL_HOST=$(recap fixed "$FAIL_HOST" changed) fleet-3=$(recap fixed fleet-3 changed)"
	[ "$(recap fixed fleet-1 changed)" = 0 ] || fail "fleet-1, which had the change, changed"
	for h in "$FAIL_HOST" fleet-3; do [ "$(recap fixed "$h" changed)" -gt 0 ] || fail "$h did not change"; done
	[ "$bad" -eq 0 ] || fail "$bad requests failed"
	playbook fixed-again -e envoy_agent_config_version=3 -e "envoy_agent_bootstrap_template=$repo/test/fleet/port-taken.yaml.j2" ||
		{ show_play fixed-again; fail "the second run failed"; }
	for h in "${HOSTS[@]}"; do
		[ "$(recap fixed-again "$h" changed)" = 0 ] || { grep -E "^changed: \[$h\]" -B2 "$work/fixed-again.play"; fail "$h: changed=$(recap fixed-again "$h" changed) on the second run"; }
		files_state "$h" in_sync >/dev/null
	done
}

# The rollout of a change that every check passes but that makes the traffic worse: / routed to a
# cluster whose endpoint refuses connections, with the reload guard on (reload_guard "5s"). The
# role reloads with --wait: on the first host the guard sees the 503s and rolls the reload back
# in place, `reload --wait` exits 5, the role puts that host's files back and fails it, and the
# rollout stops there: the later hosts are untouched, with 0 failed requests. The first host
# serves the configuration from before; its failed requests are the regression's, until the
# rollback.
GUARD_AGENT='{"envoy_agent_agent": {"termination_drain_duration": "3s", "min_drain_duration": "1s", "exit_on_zero_active_connections": true, "reload_guard": "5s"}}'
guard_rollback() {
	local h
	for h in fleet-2 fleet-3; do host_state "$h" >"$work/$h.before" || return 1; done
	load_start guard
	playbook guard -e envoy_agent_config_version=4 -e "envoy_agent_bootstrap_template=$repo/test/fleet/refusing.yaml.j2" -e "$GUARD_AGENT"
	local rc=$?
	load_stop guard
	load_report guard | tee "$work/guard.report" | grep '^detail'
	[ $rc -ne 0 ] || fail "the playbook succeeded with a change the reload guard should roll back"
	local failed_task
	failed_task=$(awk '/^(RUNNING HANDLER|TASK) \[/ {t = $0} /^fatal: \[fleet-1\]/ {print t; exit}' "$work/guard.play" |
		sed 's/^[A-Z ]* \[\(.*\)\] \**$/\1/')
	echo "detail: fleet-1 failed at \"$failed_task\": $(grep -m1 -oE 'the reload guard rolled the reload back[^"]*' "$work/guard.play" | cut -c1-220)"
	[ "$failed_task" = "envoy_agent : The reload failed" ] || { show_play guard; fail "fleet-1 did not fail at the reload"; }
	grep -q 'the reload guard rolled the reload back' "$work/guard.play" || { show_play guard; fail "the failure does not say the reload guard rolled it back"; }
	grep -q "the files its Envoy serves were put back" "$work/guard.play" || { show_play guard; fail "the failure does not say the files were put back"; }
	for h in fleet-2 fleet-3; do
		! grep -qE "^(ok|changed|fatal|skipping): \[$h\]" "$work/guard.play" || fail "the play ran tasks on $h"
		host_state "$h" >"$work/$h.after"
		diff "$work/$h.before" "$work/$h.after" || fail "$h changed: live files, agent or reload count"
	done
	[ "$(answer fleet-1)" = "200 3" ] || fail "fleet-1 answered \"$(answer fleet-1)\", want \"200 3\" (the configuration from before)"
	files_state fleet-1 in_sync >/dev/null
	on fleet-1 envoy-agent status --json | python3 -c '
import json, sys
from datetime import datetime
lr = json.load(sys.stdin)["last_reload"]
rb = lr.get("rollback") or {}
t = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00")[:26] + "+00:00")
print("detail: fleet-1 last reload %s %s: regression called %.1fs after the reload began, rolled back %s in %d ms: %s" % (
    lr["outcome"], lr["at"], (t(rb["at"]) - t(lr["at"])).total_seconds(), rb["path"], rb["took_ms"], rb["reason"]))
sys.exit(lr["outcome"] != "rolled_back")' || fail "fleet-1's status does not say rolled_back"
	local h2 h3
	h2=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["failed"])' "$work/fleet-2.guard.json")
	h3=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["failed"])' "$work/fleet-3.guard.json")
	[ "$h2" = 0 ] && [ "$h3" = 0 ] || fail "requests failed on the untouched hosts: fleet-2 $h2, fleet-3 $h3"
}

# Check mode with a change: the diff of each host's files and the plan of its reload as the
# running agent makes it (validate --plan), nothing changed anywhere (the candidate is still
# validated, in a folder of its own).
check_mode() {
	local h
	for h in "${HOSTS[@]}"; do host_state "$h" >"$work/$h.before" || return 1; done
	playbook check --check --diff -e envoy_agent_config_version=4 -e "envoy_agent_envoy_binary_src=$share/envoy-last" \
		-e "envoy_agent_deb=$share/envoy-agent-upgrade.deb" || { show_play check; fail "the check failed"; }
	local diffs
	diffs=$(grep -cE '^\+.*Configuration version 4' "$work/check.play")
	echo "detail: $diffs diffs of the bootstrap shown"
	[ "$diffs" -ge "${#HOSTS[@]}" ] || { show_play check; fail "want a diff of the bootstrap for each host"; }
	local plans
	# Ansible prints each line of the plan quoted, with ' or ".
	plans=$(grep -cE "[\"']plan: (in place|hot restart|drain and restart): " "$work/check.play")
	echo "detail: $plans plans shown: $(grep -m1 -oE "[\"']plan: (in place|hot restart|drain and restart): .*" "$work/check.play" | cut -c2-160)"
	[ "$plans" -ge "${#HOSTS[@]}" ] || { show_play check; fail "want the plan of each host's reload"; }
	for h in "${HOSTS[@]}"; do
		host_state "$h" >"$work/$h.after"
		diff "$work/$h.before" "$work/$h.after" || fail "$h changed in check mode"
	done
	expect_version 2
}

served_envoy() { # served_envoy HOST: the version the serving Envoy reports
	on "$1" curl -s --unix-socket /run/envoy-agent/admin.sock http://envoy/server_info | python3 -c 'import json,sys; print(json.load(sys.stdin)["version"].split("/")[1])'
}

envoy_upgrade() {
	local h
	for h in "${HOSTS[@]}"; do [ "$(served_envoy "$h")" = "$envoy_from" ] || fail "$h: not on Envoy $envoy_from before"; done
	publish "$envoy_deb_to" || fail "publishing Envoy $envoy_to failed"
	load_start envoy
	playbook envoy -e envoy_agent_config_version=2 -e envoy_agent_envoy_upgrade=true \
		-e "envoy_agent_envoy_binary_src=$share/envoy-last"
	local rc=$?
	load_stop envoy
	local bad
	bad=$(load_report envoy | tee "$work/envoy.report" | tail -n1)
	grep '^detail' "$work/envoy.report"
	[ $rc -eq 0 ] || { show_play envoy; fail "the playbook failed"; }
	for h in "${HOSTS[@]}"; do
		[ "$(served_envoy "$h")" = "$envoy_to" ] || fail "$h: serving Envoy $(served_envoy "$h"), want $envoy_to"
	done
	from_repo "envoy_$envoy_to" | grep . || fail "$REPO_HOST did not fetch Envoy $envoy_to from the repository"
	echo "detail: every host serving Envoy $envoy_to; $REPO_HOST's envoy package $(on "$REPO_HOST" dpkg-query -W -f '${Version}' envoy)"
	expect_version 2
	[ "$bad" -eq 0 ] || fail "$bad requests failed"
}

# The agent's package upgrade hands the running Envoy over to the new agent live (the postinst's
# envoy-agent upgrade: the agent re-executes itself in the same process): no request may fail, the
# main PID stays, and the agent that runs is the new version.
agent_upgrade() {
	local h pids=() envoys=()
	for h in "${HOSTS[@]}"; do
		pids+=("$(on "$h" systemctl show -p MainPID --value envoy-agent)")
		envoys+=("$(on "$h" pgrep -n -f -- ' --restart-epoch [0-9]')")
	done
	# The file under its own name, as a release is published (the share's copy has another).
	publish "$(ls "$work"/upgrade/envoy-agent_*.deb)" || fail "publishing the upgrade failed"
	load_start agent
	playbook agent -e envoy_agent_config_version=2 -e envoy_agent_upgrade=true \
		-e "envoy_agent_deb=$share/envoy-agent-upgrade.deb" -e "envoy_agent_envoy_binary_src=$share/envoy-last"
	local rc=$?
	load_stop agent
	local bad
	bad=$(load_report agent | tee "$work/agent.report" | tail -n1)
	grep '^detail' "$work/agent.report"
	[ $rc -eq 0 ] || { show_play agent; fail "the playbook failed"; }
	local i=0 v want
	want=$(dpkg-deb -f "$share/envoy-agent-upgrade.deb" Version)
	for h in "${HOSTS[@]}"; do
		v=$(on "$h" dpkg-query -W -f '${Version}' envoy-agent)
		[ "$v" = "$want" ] || fail "$h: envoy-agent $v installed"
		[ "$(on "$h" systemctl show -p MainPID --value envoy-agent)" = "${pids[$i]}" ] ||
			fail "$h: the agent's main PID changed (${pids[$i]} -> $(on "$h" systemctl show -p MainPID --value envoy-agent)): restarted, not handed over"
		on "$h" pgrep -x envoy | grep -x "${envoys[$i]}" >/dev/null || fail "$h: Envoy pid ${envoys[$i]} is gone"
		i=$((i + 1))
	done
	expect_version 2
	from_repo "envoy-agent_$want" | grep . || fail "$REPO_HOST did not fetch envoy-agent $want from the repository"
	echo "detail: $bad failed requests in all; main PIDs ${pids[*]} kept, Envoy pids ${envoys[*]} kept; $REPO_HOST upgraded from the repository"
	[ "$bad" -eq 0 ] || fail "$bad requests failed"
}

second_run() {
	playbook again -e envoy_agent_config_version=2 -e "envoy_agent_envoy_binary_src=$share/envoy-last" \
		-e "envoy_agent_deb=$share/envoy-agent-upgrade.deb" || { show_play again; return 1; }
	local h c
	for h in "${HOSTS[@]}"; do
		c=$(recap again "$h" changed)
		echo "detail: $h changed=$c"
		[ "$c" = 0 ] || { grep -E "^changed: \[$h\]" -B2 "$work/again.play"; fail "$h: changed=$c"; }
	done
}

# --- main ------------------------------------------------------------------------------------

[ "$(id -u)" = 0 ] || { echo "FAIL fleet needs root"; echo "0 passed, 1 failed"; exit 1; }

if setup_step "setup: systemd-nspawn and ansible present" host_tools &&
	setup_step "setup: packages, Envoy and load client staged" prepare_share &&
	setup_step "setup: bookworm rootfs with python3" ensure_rootfs &&
	setup_step "boot: three hosts, systemd PID 1, one network namespace each" boot &&
	setup_step "setup: the package repository served over HTTP on $REPO_HOST's loopback" serve_repo; then
	if step "install from scratch: packages ($REPO_HOST from the repository), config v1, unit enabled, active and ready" install; then
		step "config change v1 -> v2 under load: one host after the other, 0 failed requests" config_change
		step "broken bootstrap: validate stops it on the first host, nothing changed anywhere" broken_config
		step "reload failing at run time on $FAIL_HOST (a new listener's port held there): rollout stopped at it, 0 failed requests, its files put back; restarted before the fix, it serves the old configuration" reload_fails
		step "port freed: a re-run brings every host to the new configuration, 0 failed requests; the run after changes nothing" fixed_rerun
		step "a change the reload guard rolls back on the first host (reload --wait): rollout stopped at it, its files put back, the later hosts untouched with 0 failed requests" guard_rollback
		if [ "$envoy_from" != "$envoy_to" ]; then
			step "Envoy upgrade $envoy_from -> $envoy_to under load (hot restart; $REPO_HOST: the package published and upgraded from the repository): 0 failed requests" envoy_upgrade
		else
			echo "NOTE Envoy upgrade step left out: ENVOY_BIN_FROM not set (one Envoy version only)"
		fi
		step "envoy-agent package upgrade under load ($REPO_HOST: from the repository): handed over live, 0 failed, same main PID and Envoy" agent_upgrade
		step "second run: changed=0 on every host" second_run
		step "check mode with a change: each host's diff, nothing changed" check_mode
	else
		skip "rollout steps" "the install failed"
	fi
else
	skip "fleet steps" "setup failed"
fi

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
