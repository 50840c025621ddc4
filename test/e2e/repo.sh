#!/usr/bin/env bash
# The package repository end to end (`make e2e-repo`; docs/packaging.md, "The package repository").
#
# Boots Debian 12 with systemd as PID 1 under systemd-nspawn (private network, volatile overlay
# over the rootfs `make e2e` caches), serves a repository made by packaging/repo/mkrepo.sh over
# HTTP on the container's loopback (a Python http.server from this host, in the container's network
# namespace: apt fetches over HTTP as it would from a real server), and drives the host with apt
# only:
#   the repository added as an operator would (the key in /etc/apt/keyrings, a deb822 .sources
#   file with Signed-By), `apt-get update` verifies InRelease (and refuses it with another key);
#   `apt-get install envoy-agent envoy` installs and starts the agent, traffic passes;
#   a newer envoy-agent (this tree built with another version) published, `apt-get upgrade` under
#   a load of clients that do not retry: 0 failed, the agent handed over live (same MainPID, same
#   Envoy process, the handover in the journal);
#   a newer envoy-agent and a newer Envoy published together, `apt-get upgrade` under load: 0
#   failed, the agent handed over live, Envoy hot restarted into the new release by the package's
#   trigger (/server_info says it);
#   unattended-upgrades (Debian's, fetched with apt into a throwaway copy of the rootfs) with
#   Origins-Pattern "origin=envoy-agent": a newer envoy-agent published, apt's own daily units
#   (apt-daily.service, apt-daily-upgrade.service) update and upgrade it under load: 0 failed,
#   handed over live (unattended-upgrades' log names envoy-agent).
#
# Prints one "PASS|FAIL <step>" line per step and ends with "N passed, N failed" and the wall time;
# exits non-zero on any failure. Needs root. Inputs (environment, all optional):
#   DIST       directory with the packages of `make package` and `make package-envoy` (dist)
#   PKG_STAGE  directory with the generated config.toml, for the newer packages (.cache/package)
#   NFPM_CONFIG the nfpm configuration for the newer packages (packaging/nfpm.yaml)
#   E2E_ENVOY_FROM, E2E_ENVOY_TO  the Envoy releases installed first and upgraded to (1.39.3, 1.40.0)
#   GNUPGHOME  keyring of the repository's signing key (.cache/repo-gnupg; a test key is made there)
#   E2E_ROOTS  directory of the cached rootfs, E2E_ROOTS/rootfs-bookworm (.cache), shared with
#              `make e2e` (built with debootstrap when missing or stale)
#   E2E_KEEP=1 keep the work directory (logs, the repository) afterwards
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo" || exit 1
DIST=${DIST:-dist}
PKG_STAGE=${PKG_STAGE:-.cache/package}
NFPM_CONFIG=${NFPM_CONFIG:-packaging/nfpm.yaml}
ENVOY_FROM=${E2E_ENVOY_FROM:-1.39.3}
ENVOY_TO=${E2E_ENVOY_TO:-1.40.0}
export GNUPGHOME=${GNUPGHOME:-$repo/.cache/repo-gnupg}
release=bookworm
ROOTFS=${E2E_ROOTS:-$repo/.cache}/rootfs-$release
# The rootfs is the one `make e2e` builds and caches: the same packages, read from its script so
# that the two never rebuild each other's cache.
ROOTFS_INCLUDE=$(sed -n 's/^ROOTFS_INCLUDE=//p' test/e2e/run.sh)
UNIT=envoy-agent.service
HTTP=http://127.0.0.1:80
REPO_PORT=8080
REPO_URL=http://127.0.0.1:$REPO_PORT

passed=0
failed=0
start_all=$SECONDS
work=$(mktemp -d /tmp/envoy-agent-e2e-repo.XXXXXX)
share=$work/share # bound read-only at /mnt/e2e in the container
mkdir -p "$share"
nspawn_pid=
http_pid=
client_pid=
ct=

# shellcheck source=test/lib/steps.sh
. "$repo/test/lib/steps.sh"

# --- the container (as test/e2e/run.sh) ----------------------------------------------------------

ct_run() {
	timeout --kill-after=5 "${T:-60}" nsenter --target "$ct" --mount --uts --ipc --net --pid --cgroup -- "$@"
}

ct_sh() {
	ct_run /bin/sh -c "$1"
}

prop() { ct_run systemctl show -p "$1" --value "$UNIT"; }
unit_is() { [ "$(prop ActiveState)" = "$1" ]; }
cursor() { ct_run journalctl -n 0 --show-cursor --no-pager | sed -n 's/^-- cursor: //p'; }
journal_after() { ct_run journalctl -u "$UNIT" --after-cursor "$1" --no-pager -o cat; }
gone() { ! kill -0 "$1" 2>/dev/null; }

host_tools() {
	local missing=()
	command -v systemd-nspawn >/dev/null || missing+=(systemd-container)
	command -v debootstrap >/dev/null || missing+=(debootstrap)
	[ ${#missing[@]} -eq 0 ] && return 0
	timeout 300 apt-get update -q && DEBIAN_FRONTEND=noninteractive timeout 300 apt-get install -y -q --no-install-recommends "${missing[@]}"
}

ensure_rootfs() {
	[ -n "$ROOTFS_INCLUDE" ] || { echo "no ROOTFS_INCLUDE in test/e2e/run.sh"; return 1; }
	if [ "$(cat "$ROOTFS/.e2e-rootfs-include" 2>/dev/null)" = "$ROOTFS_INCLUDE" ]; then
		echo "detail: cached $ROOTFS"
		return 0
	fi
	local mirror start=$SECONDS
	mirror=$(grep -hsE '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v -e security -e updates | grep -m1 debian)
	mirror=${mirror:-http://deb.debian.org/debian}
	rm -rf "$ROOTFS" "$ROOTFS.tmp"
	mkdir -p "$(dirname "$ROOTFS")"
	timeout 900 debootstrap --variant=minbase --include="$ROOTFS_INCLUDE" "$release" "$ROOTFS.tmp" "$mirror" >"$work/debootstrap.log" 2>&1 ||
		{ tail -n 20 "$work/debootstrap.log"; return 1; }
	echo "$ROOTFS_INCLUDE" >"$ROOTFS.tmp/.e2e-rootfs-include"
	mv "$ROOTFS.tmp" "$ROOTFS"
	echo "detail: debootstrap of $release from $mirror took $((SECONDS - start))s"
}

boot() {
	local start=$SECONDS state
	SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1 systemd-nspawn -D "$ROOTFS" --boot --register=no --keep-unit \
		--volatile=overlay --private-network --machine="envoy-agent-e2e-repo-$$" \
		--bind-ro="$share:/mnt/e2e" >"$work/console.log" 2>&1 </dev/null &
	nspawn_pid=$!
	wait_for 30 pgrep -P "$nspawn_pid" || { echo "no container PID 1"; return 1; }
	ct=$(pgrep -P "$nspawn_pid" | head -n1)
	wait_for 30 test -S "/proc/$ct/root/run/systemd/private" || { echo "systemd did not come up"; return 1; }
	state=$(T=60 ct_run systemctl is-system-running --wait)
	echo "detail: $state in $((SECONDS - start))s"
	[ "$(ct_run ps -o comm= -p 1)" = systemd ] && { [ "$state" = running ] || [ "$state" = degraded ]; }
}

cleanup() {
	[ -n "$client_pid" ] && kill "$client_pid" 2>/dev/null
	[ -n "$http_pid" ] && kill "$http_pid" 2>/dev/null
	if [ -n "$nspawn_pid" ] && kill -0 "$nspawn_pid" 2>/dev/null; then
		kill -TERM "$nspawn_pid" 2>/dev/null
		for _ in $(seq 100); do
			kill -0 "$nspawn_pid" 2>/dev/null || break
			sleep 0.2
		done
		kill -KILL "$nspawn_pid" 2>/dev/null
		wait "$nspawn_pid" 2>/dev/null
	fi
	# The agent gpg started for the test key's keyring (mkrepo.sh signs with it).
	gpgconf --kill gpg-agent 2>/dev/null
	if [ "${E2E_KEEP:-0}" = 1 ]; then echo "logs kept in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'echo "FAIL interrupted"; echo "$passed passed, $((failed + 1)) failed"; exit 130' INT TERM

# --- traffic -------------------------------------------------------------------------------------

get() { # get PATH: one request from inside the container; prints "CODE BODY"
	ct_run curl -sS --max-time 10 -w ' %{http_code}' "$HTTP$1" | awk '{print $NF, $1}'
}

# client_start NAME: a client inside the container sending requests back to back (curl: one
# request per connection, no retry), one line "CODE BODY" per request, until client_stop.
client_start() {
	T=600 ct_sh "rm -f /run/e2e-client-stop; while [ ! -e /run/e2e-client-stop ]; do
		curl -s --max-time 5 -w ' %{http_code}\n' $HTTP/ | awk '{print \$NF, \$1}'
		sleep 0.02; done" >"$work/$1.client" 2>&1 &
	client_pid=$!
	wait_for 10 test -s "$work/$1.client"
}

# client_stop NAME: stops the client; prints its counts and fails if any request failed.
client_stop() {
	wait_for 30 has_lines "$work/$1.client" 10 # as run.sh's client_stop
	ct_sh "touch /run/e2e-client-stop"
	wait_for 15 gone "$client_pid" || kill "$client_pid" 2>/dev/null
	client_pid=
	local total bad
	total=$(wc -l <"$work/$1.client")
	bad=$(grep -cvE '^200 v1$' "$work/$1.client")
	echo "detail: $total requests, $bad failed"
	[ "$total" -ge 10 ] || fail "too few requests"
	[ "$bad" -eq 0 ] || { grep -vE '^200 v1$' "$work/$1.client" | sort | uniq -c; fail "failed requests"; }
}

# A serving Envoy is the agent's child with --restart-epoch on its command line.
envoy_pid() { ct_run pgrep -n -P "$(prop MainPID)" -f -- ' --restart-epoch [0-9]'; }
envoy_count() { ct_run pgrep -c -P "$(prop MainPID)" -f -- ' --restart-epoch [0-9]'; }
envoy_started() { ct_sh "cut -d' ' -f22 /proc/$1/stat"; }
server_version() {
	ct_run curl -sS --max-time 5 --unix-socket /run/envoy-agent/admin.sock http://envoy/server_info |
		sed -n 's|.*"version": "[0-9a-f]*/\([^/]*\)/.*|\1|p'
}
installed() { ct_run dpkg-query -W -f '${Package} ${Version}, ' envoy-agent envoy; }

# apt_ct ARGS...: apt-get in the container, non-interactive, keeping the edited conffiles; its
# output is kept in $work/apt.log for the no-warning checks.
apt_ct() {
	local out rc
	out=$(T=300 ct_run env DEBIAN_FRONTEND=noninteractive apt-get -y -o Dpkg::Options::=--force-confold "$@" </dev/null 2>&1)
	rc=$?
	echo "$out"
	echo "$out" | sed "s|^|[apt-get $*] |" >>"$work/apt.log"
	return $rc
}

# --- the repository --------------------------------------------------------------------------------

# publish PACKAGE...: into the served repository, as a release manager would (mkrepo.sh).
publish() {
	REPO_TEST_KEY=1 REPO_URL=$REPO_URL timeout 120 packaging/repo/mkrepo.sh "$work/repo" "$@"
}

# newer_agent VERSION: this tree's agent built with VERSION, packaged as a .deb; prints its path.
newer_agent() {
	mkdir -p "$work/agent-$1"
	CGO_ENABLED=0 timeout 300 go build -trimpath -ldflags "-s -w -X main.version=$1" -o "$work/agent-$1/envoy-agent" ./cmd/envoy-agent &&
		PKG_STAGE=$PKG_STAGE timeout 300 go run ./packaging/cmd/mkpkg -config "$NFPM_CONFIG" -formats deb \
			-version "$1" -binary "$work/agent-$1/envoy-agent" -out "$work/agent-$1" >/dev/null || return 1
	ls "$work/agent-$1"/envoy-agent_*.deb
}

# --- steps ---------------------------------------------------------------------------------------

prepare() {
	local arch
	arch=$(dpkg --print-architecture)
	deb=$(ls -t "$DIST"/envoy-agent_*_"$arch".deb 2>/dev/null | head -n1)
	[ -n "$deb" ] || { echo "no $arch envoy-agent .deb in $DIST (run make package)"; return 1; }
	envoy_from=$DIST/envoy_${ENVOY_FROM}-1_$arch.deb
	envoy_to=$DIST/envoy_${ENVOY_TO}-1_$arch.deb
	[ -f "$envoy_from" ] && [ -f "$envoy_to" ] || { echo "no Envoy $ENVOY_FROM or $ENVOY_TO .deb in $DIST (make package-envoy)"; return 1; }
	version=$(dpkg-deb -f "$deb" Version)
	ver2="${version%-*}.2"
	ver3="${version%-*}.3"
	deb2=$(newer_agent "$ver2") && deb3=$(newer_agent "$ver3") || return 1
	# The repository as first published: this envoy-agent and the older Envoy.
	publish "$deb" "$envoy_from" || return 1
	cp "$work/repo/envoy-agent-archive-keyring.gpg" "$work/repo/envoy-agent.sources" "$share/" || return 1
	sed -e "s/@BODY@/v1/" -e "s|@EXTRA_ROUTES@||" test/e2e/bootstrap.yaml.in >"$share/v1.yaml" || return 1
	echo "detail: $(basename "$deb") and envoy $ENVOY_FROM, then envoy-agent $ver2, then envoy-agent $ver3 with envoy $ENVOY_TO"
}

# serve: the repository over HTTP on the container's loopback. The server is this host's Python,
# in the container's network namespace only: it reads the files here.
serve() {
	nsenter --target "$ct" --net -- /usr/bin/python3 -m http.server "$REPO_PORT" --bind 127.0.0.1 \
		--directory "$work/repo" >"$work/http.log" 2>&1 </dev/null &
	http_pid=$!
	wait_for 10 ct_run curl -sf -o /dev/null "$REPO_URL/apt/dists/stable/InRelease" || { cat "$work/http.log"; return 1; }
}

# add_repository: as an operator on a host: the key in /etc/apt/keyrings, the .sources file. The
# container has no network: Debian's own sources go, so that apt-get update fetches ours only.
add_repository() {
	ct_sh 'set -e
		install -d -m 0755 /etc/apt/keyrings
		install -m 0644 /mnt/e2e/envoy-agent-archive-keyring.gpg /etc/apt/keyrings/
		install -m 0644 /mnt/e2e/envoy-agent.sources /etc/apt/sources.list.d/envoy-agent.sources
		rm -f /etc/apt/sources.list /etc/apt/sources.list.d/debian.sources
		cat /etc/apt/sources.list.d/envoy-agent.sources' || return 1
	apt_ct update || return 1
	! grep -E '^(W|E):' "$work/apt.log" || fail "apt-get update warned"
	echo "detail: $(ct_run apt-cache policy envoy-agent | grep -m1 Candidate | xargs), $(ct_run apt-cache policy envoy | grep -m1 Candidate | xargs)"
}

# uu_download: unattended-upgrades and what it needs beyond the rootfs, fetched with apt in a
# throwaway copy of the rootfs that has this host's network (the booted container has none).
uu_download() {
	mkdir -p "$share/uu"
	timeout 300 systemd-nspawn -q -D "$ROOTFS" --register=no --keep-unit --volatile=overlay \
		--machine="envoy-agent-e2e-repo-apt-$$" --bind="$share/uu:/mnt/debs" --pipe /bin/sh -ec '
		apt-get -qq update
		apt-get -qq install --download-only -y --no-install-recommends -o Dir::Cache::archives=/mnt/debs unattended-upgrades' \
		</dev/null >"$work/uu-apt.log" 2>&1 || { tail -n 20 "$work/uu-apt.log"; return 1; }
	echo "detail: $(find "$share/uu" -maxdepth 1 -name '*.deb' | wc -l) packages"
}

# unattended: unattended-upgrades set to take this repository's packages (by its Release's
# Origin), a newer envoy-agent published, then apt's own daily units run as their timers would.
unattended() {
	local ver4=${version%-*}.4 deb4 pid0 epid0 est0 since v n start took crc
	# apt orders the local files by their dependencies (Pre-Depends included), as dpkg -i does not.
	T=300 ct_sh 'DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends /mnt/e2e/uu/*.deb' >"$work/uu-dpkg.log" 2>&1 ||
		{ tail -n 20 "$work/uu-dpkg.log"; fail "installing unattended-upgrades failed"; }
	ct_sh 'cat > /etc/apt/apt.conf.d/51envoy-agent-unattended <<EOF
Unattended-Upgrade::Origins-Pattern { "origin=envoy-agent"; };
APT::Periodic::Update-Package-Lists "1";
APT::Periodic::Unattended-Upgrade "1";
APT::Periodic::RandomSleep "0";
EOF' || return 1
	deb4=$(newer_agent "$ver4") && publish "$deb4" >/dev/null || return 1
	pid0=$(prop MainPID)
	epid0=$(envoy_pid) || fail "no Envoy running"
	est0=$(envoy_started "$epid0")
	since=$(cursor)
	client_start unattended || return 1
	sleep 1
	start=$SECONDS
	T=300 ct_run systemctl start apt-daily.service || fail "apt-daily.service failed"
	T=300 ct_run systemctl start apt-daily-upgrade.service || fail "apt-daily-upgrade.service failed"
	took=$((SECONDS - start))
	sleep 1
	client_stop unattended
	crc=$?
	journal_after "$since" >"$work/unattended.journal"
	ct_run cat /var/log/unattended-upgrades/unattended-upgrades.log >"$work/uu.log" 2>&1
	sed 's/^/u-u: /' "$work/uu.log" | tail -n 20
	grep -q 'Packages that will be upgraded: envoy-agent' "$work/uu.log" || fail "unattended-upgrades' log does not name envoy-agent"
	v=$(ct_run envoy-agent version)
	n=$(envoy_count)
	echo "detail: apt-daily and apt-daily-upgrade in ${took}s; $(installed)$v; MainPID $pid0 -> $(prop MainPID); Envoy pid $epid0 -> $(envoy_pid)"
	[ $crc -eq 0 ] || fail "requests failed during the upgrade"
	[ "$v" = "envoy-agent $ver4" ] || fail "envoy-agent version says \"$v\", want $ver4"
	[ "$(prop MainPID)" = "$pid0" ] || fail "MainPID changed: the unit was restarted, not handed over live"
	grep -q 'handing Envoy' "$work/unattended.journal" || fail "no handover in the journal"
	[ "$(envoy_pid)" = "$epid0" ] && [ "$(envoy_started "$epid0")" = "$est0" ] || fail "Envoy was not kept"
	[ "$n" = 1 ] || fail "$n Envoy processes"
	unit_is active && [ "$(get /)" = "200 v1" ] || fail "not serving after the upgrade"
}

# wrong_key: the same repository with another key in Signed-By (Debian's archive key): apt refuses it.
wrong_key() {
	local out rc
	ct_sh 'set -e; mkdir -p /tmp/wrong.d /tmp/wrong-lists/partial
		sed "s|^Signed-By: .*|Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg|" \
		/etc/apt/sources.list.d/envoy-agent.sources > /tmp/wrong.d/envoy-agent.sources' || return 1
	out=$(T=120 ct_run apt-get update -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts=/tmp/wrong.d \
		-o Dir::State::Lists=/tmp/wrong-lists 2>&1)
	rc=$?
	echo "$out" | grep -E 'NO_PUBKEY|not signed|signature' | head -n 3
	echo "detail: apt-get update exit $rc"
	[ $rc -ne 0 ] && grep -q NO_PUBKEY <<<"$out" || fail "apt-get update accepted the repository with the wrong key"
}

install_from_repo() {
	apt_ct install envoy-agent envoy || return 1
	echo "detail: $(installed)$(ct_run envoy --version | grep -o 'version: [^ ]*')"
	[ "$(ct_run dpkg-query -W -f '${Version}' envoy-agent)" = "$version" ] || fail "envoy-agent is not $version"
	[ "$(ct_run dpkg-query -W -f '${Version}' envoy)" = "$ENVOY_FROM-1" ] || fail "envoy is not $ENVOY_FROM"
	wait_for 60 unit_is active || fail "the unit is $(prop ActiveState)"
}

# serve_traffic: the admin's edits (the e2e bootstrap on port 80, short drains), as make e2e does.
serve_traffic() {
	ct_sh 'set -e
		c=/etc/envoy-agent/config.toml
		sed -i -e "s/^\([[:space:]]*drain_duration[[:space:]]*=\).*/\1 \"3s\"/" \
		       -e "s/^\([[:space:]]*parent_shutdown_duration[[:space:]]*=\).*/\1 \"6s\"/" \
		       -e "s/^\([[:space:]]*min_drain_duration[[:space:]]*=\).*/\1 \"1s\"/" "$c"
		cat /mnt/e2e/v1.yaml > /etc/envoy-agent/envoy.yaml' || return 1
	T=120 ct_run systemctl restart "$UNIT" || { ct_run journalctl -u "$UNIT" -n 30 --no-pager; return 1; }
	wait_for 60 unit_is active || fail "the unit is $(prop ActiveState)"
	[ "$(get /)" = "200 v1" ] || fail "GET / answered \"$(get /)\""
	echo "detail: MainPID $(prop MainPID), Envoy $(envoy_pid) ($(server_version))"
}

# apt_upgrade NAME AGENT_VERSION ENVOY_VERSION ENVOY_REPLACED: apt-get update and upgrade under
# load; the agent must be handed over live (same MainPID, the handover in the journal, the new
# version answering), Envoy kept (ENVOY_REPLACED=no: same process) or hot restarted into the new
# release (yes), 0 failed requests.
apt_upgrade() {
	local name=$1 want=$2 wantenvoy=$3 replaced=$4 pid0 epid0 est0 since rc crc v epid1 sv n start
	pid0=$(prop MainPID)
	epid0=$(envoy_pid) || fail "no Envoy running"
	est0=$(envoy_started "$epid0")
	since=$(cursor)
	apt_ct update >/dev/null || fail "apt-get update failed"
	echo "upgradable: $(ct_run apt list --upgradable 2>/dev/null | grep -v Listing | tr '\n' ' ')"
	client_start "$name" || return 1
	sleep 1
	start=$SECONDS
	apt_ct upgrade >"$work/$name.apt"
	rc=$?
	local took=$((SECONDS - start))
	[ "$replaced" = yes ] && { wait_for 30 sh -c "[ \"\$(nsenter --target $ct --mount --pid -- pgrep -c -x envoy)\" = 1 ]" || echo "the old Envoy epoch did not exit in 30s"; }
	sleep 1
	client_stop "$name"
	crc=$?
	cat "$work/$name.apt"
	journal_after "$since" >"$work/$name.journal"
	v=$(ct_run envoy-agent version)
	epid1=$(envoy_pid)
	sv=$(server_version)
	n=$(envoy_count)
	echo "detail: apt-get upgrade exit $rc in ${took}s; $(installed)$v; MainPID $pid0 -> $(prop MainPID); Envoy pid $epid0 -> $epid1, /server_info $sv"
	grep -m1 'handing Envoy' "$work/$name.journal" | sed 's/^/journal: /'
	[ $rc -eq 0 ] || fail "apt-get upgrade failed"
	! grep -E '^(W|E):' "$work/$name.apt" || fail "apt-get upgrade warned"
	[ $crc -eq 0 ] || fail "requests failed during the upgrade"
	[ "$v" = "envoy-agent $want" ] || fail "envoy-agent version says \"$v\", want $want"
	[ "$(prop MainPID)" = "$pid0" ] || fail "MainPID changed: the unit was restarted, not handed over live"
	grep -q 'handing Envoy' "$work/$name.journal" || fail "no handover in the journal"
	[ "$sv" = "$wantenvoy" ] || fail "/server_info says $sv, want $wantenvoy"
	[ "$n" = 1 ] || fail "$n Envoy processes"
	if [ "$replaced" = yes ]; then
		[ "$epid1" != "$epid0" ] || fail "Envoy was not replaced"
		grep -q 'reloading envoy-agent.service' "$work/$name.apt" || fail "the Envoy package's trigger did not reload the agent"
	else
		[ "$epid1" = "$epid0" ] && [ "$(envoy_started "$epid0")" = "$est0" ] || fail "Envoy was not kept"
	fi
	unit_is active && [ "$(get /)" = "200 v1" ] || fail "not serving after the upgrade"
}

upgrade_agent() {
	publish "$deb2" >/dev/null || return 1
	apt_upgrade agent "$ver2" "$ENVOY_FROM" no
}

upgrade_both() {
	publish "$deb3" "$envoy_to" >/dev/null || return 1
	apt_upgrade both "$ver3" "$ENVOY_TO" yes
}

[ "$(id -u)" = 0 ] || { echo "FAIL e2e-repo needs root"; echo "0 passed, 1 failed"; exit 1; }

setup_step "host: systemd-container and debootstrap present" host_tools
if setup_step "setup: packages built, the repository made and signed (mkrepo.sh)" prepare &&
	setup_step "setup: $release rootfs" ensure_rootfs &&
	{ setup_step "setup: unattended-upgrades fetched with apt (a throwaway copy of the rootfs)" uu_download && uu_ready=1; true; } &&
	setup_step "boot: systemd is PID 1 in the $release container" boot; then
	if setup_step "repository served over HTTP on the container's loopback" serve &&
		step "apt: the repository added (keyring, deb822 .sources with Signed-By), apt-get update verifies it" add_repository; then
		step "apt: the same repository with another key in Signed-By is refused (NO_PUBKEY)" wrong_key
		if step "apt-get install envoy-agent envoy: installed from the repository, unit active" install_from_repo &&
			step "traffic passes (bootstrap v1 on port 80)" serve_traffic; then
			step "apt-get upgrade (newer envoy-agent) under load: 0 failed, handed over live (same MainPID, same Envoy)" upgrade_agent
			step "apt-get upgrade (newer envoy-agent and Envoy $ENVOY_TO) under load: 0 failed, agent handed over live, Envoy hot restarted into it by a reload" upgrade_both
			[ -n "${uu_ready:-}" ] &&
				step "unattended-upgrades (apt-daily, apt-daily-upgrade) takes a newer envoy-agent under load: 0 failed, handed over live" unattended
		fi
	fi
	if [ $failed -gt 0 ] && [ -n "$ct" ]; then
		echo "--- journal of envoy-agent (last 40 lines)"
		ct_run journalctl -u "$UNIT" --no-pager -o short-monotonic 2>&1 | grep -v '\]\[info\]\[' | tail -n 40 | sed 's/^/    /'
	fi
fi
echo "wall time: $((SECONDS - start_all))s"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
