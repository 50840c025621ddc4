#!/usr/bin/env bash
# End-to-end tests of the envoy-agent .deb in a real systemd (`make e2e`; docs/design.md, section 12).
#
# Boots Debian with systemd as PID 1 under systemd-nspawn (private network, volatile overlay over
# a cached debootstrap rootfs), once per release in E2E_RELEASES, installs the Envoy package
# (`make package-envoy`) and
# the envoy-agent package with dpkg and drives them with dpkg and systemctl only; upgrades and
# downgrades the Envoy package under load. Also checks the unit with systemd-analyze,
# a dpkg install without a running systemd, and the .rpm (inspection, and an install into a
# scratch root with Debian's rpm).
#
# Which release runs which steps (main, at the end): bookworm (Debian 12) runs every step;
# bullseye (11) and trixie (13) run the operator's path: install of both packages, start, traffic,
# reload under a non-retrying load, a bad reload, stop with a request in flight, the template
# instance envoy-agent@b started and enabled, a live upgrade with it running (same processes, new
# binary, 0 failed), remove with it running (drained), purge leaving nothing, and no dpkg warning
# on any of these. The packages, upgrade packages and test data are built once for all releases;
# each release boots its own rootfs. Each release's wall time is printed.
#
# Prints one "PASS|FAIL <step>" line per step and ends with "N passed, N failed"; exits non-zero
# on any failure. Needs root. Inputs (environment, all optional):
#   DIST       directory with the packages from `make package` (dist)
#   PKG_STAGE  directory with the generated config.toml, for the upgrade package (.cache/package)
#   E2E_ENVOY_FROM, E2E_ENVOY_TO  the Envoy releases whose packages (DIST/envoy_<ver>-1_amd64.deb,
#              DIST/envoy-<ver>-1.x86_64.rpm) are installed first and upgraded to (1.39.3, 1.40.0)
#   NFPM_CONFIG the nfpm configuration for the upgrade package (packaging/nfpm.yaml)
#   BINARY     the envoy-agent binary for the upgrade package (bin/envoy-agent)
#   E2E_RELEASES the Debian releases to boot (bookworm bullseye trixie)
#   E2E_ROOTS  directory of the cached rootfs of each release, E2E_ROOTS/rootfs-<release>
#              (.cache); each is built with debootstrap when missing or stale
#   E2E_ROOTFS the rootfs when E2E_RELEASES is a single release (overrides E2E_ROOTS)
#   E2E_KEEP=1 keep the work directory (logs) afterwards
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo" || exit 1
DIST=${DIST:-dist}
PKG_STAGE=${PKG_STAGE:-.cache/package}
ENVOY_FROM=${E2E_ENVOY_FROM:-1.39.3}
ENVOY_TO=${E2E_ENVOY_TO:-1.40.0}
NFPM_CONFIG=${NFPM_CONFIG:-packaging/nfpm.yaml}
BINARY=${BINARY:-${PKG_STAGE:-.cache/package}/envoy-agent}
RELEASES=${E2E_RELEASES:-bookworm bullseye trixie}
ROOTS=${E2E_ROOTS:-$repo/.cache}
# man-db and logrotate: the man page and log rotation steps use the distribution's own tools.
ROOTFS_INCLUDE=systemd,systemd-sysv,dbus,procps,curl,man-db,logrotate
UNIT=envoy-agent.service
HTTP=http://127.0.0.1:80

passed=0
failed=0
work=$(mktemp -d /tmp/envoy-agent-e2e.XXXXXX)
share=$work/share # bound read-only at /mnt/e2e in the container
mkdir -p "$share"
nspawn_pid=
ct= # the container's PID 1, as seen from the host

# --- reporting ---------------------------------------------------------------------------------

# shellcheck source=test/lib/steps.sh
. "$repo/test/lib/steps.sh"

# --- the container -------------------------------------------------------------------------------

# ct_run CMD...: run CMD inside the booted container, bounded by $T seconds (default 60).
ct_run() {
	timeout --kill-after=5 "${T:-60}" nsenter --target "$ct" --mount --uts --ipc --net --pid --cgroup -- "$@"
}

ct_sh() {
	ct_run /bin/sh -c "$1"
}

prop() { # prop NAME: one property of the unit
	ct_run systemctl show -p "$1" --value "$UNIT"
}

cursor() { # the journal's current position, for journal_after
	ct_run journalctl -n 0 --show-cursor --no-pager | sed -n 's/^-- cursor: //p'
}

journal_after() { # journal_after CURSOR: the unit's journal since CURSOR
	ct_run journalctl -u "$UNIT" --after-cursor "$1" --no-pager -o cat
}

# dpkg_ct ARGS...: dpkg inside the container; its output is printed and kept, labelled with the
# release and the command, in $work/dpkg-all.log for the no-warning step.
dpkg_ct() {
	local out rc
	out=$(T=180 ct_run dpkg "$@" </dev/null 2>&1)
	rc=$?
	echo "$out"
	echo "$out" | sed "s|^|[$release dpkg $*] |" >>"$work/dpkg-all.log"
	return $rc
}

unit_is() { # unit_is STATE: ActiveState is STATE
	[ "$(prop ActiveState)" = "$1" ]
}

debian_mirror() {
	local m
	m=$(grep -hsE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' |
		grep -v -e security -e updates | grep -m1 debian)
	[ -n "$m" ] || m=$(grep -hsE '^deb +(\[[^]]*\] +)?https?://[^ ]+ +[a-z]+ ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
		grep -v -e security -e -updates |
		sed -E 's/^deb +(\[[^]]*\] +)?//' | awk '{print $1}' | head -n1)
	echo "${m:-http://deb.debian.org/debian}"
}

host_tools() {
	local missing=()
	command -v systemd-nspawn >/dev/null || missing+=(systemd-container)
	command -v debootstrap >/dev/null || missing+=(debootstrap)
	command -v rpm >/dev/null || missing+=(rpm)
	[ ${#missing[@]} -eq 0 ] && return 0
	echo "installing ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive timeout 300 apt-get install -y -q --no-install-recommends "${missing[@]}" ||
		{ timeout 300 apt-get update -q && DEBIAN_FRONTEND=noninteractive timeout 300 apt-get install -y -q --no-install-recommends "${missing[@]}"; }
}

# The rootfs is cached; the marker records what it was built with, so a change rebuilds it.
ensure_rootfs() {
	if [ "$(cat "$ROOTFS/.e2e-rootfs-include" 2>/dev/null)" = "$ROOTFS_INCLUDE" ]; then
		echo "detail: cached $ROOTFS"
		return 0
	fi
	local mirror start=$SECONDS
	mirror=$(debian_mirror)
	rm -rf "$ROOTFS" "$ROOTFS.tmp"
	mkdir -p "$(dirname "$ROOTFS")"
	timeout 900 debootstrap --variant=minbase --include="$ROOTFS_INCLUDE" "$release" "$ROOTFS.tmp" "$mirror" >"$work/debootstrap.log" 2>&1 ||
		{ tail -n 20 "$work/debootstrap.log"; return 1; }
	echo "$ROOTFS_INCLUDE" >"$ROOTFS.tmp/.e2e-rootfs-include"
	mv "$ROOTFS.tmp" "$ROOTFS"
	echo "detail: debootstrap of $release from $mirror took $((SECONDS - start))s"
}

boot() {
	local start=$SECONDS
	SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1 systemd-nspawn -D "$ROOTFS" --boot --register=no --keep-unit \
		--volatile=overlay --private-network --machine="envoy-agent-e2e-$release-$$" \
		--bind-ro="$share:/mnt/e2e" >"$work/console.log" 2>&1 </dev/null &
	nspawn_pid=$!
	wait_for 30 pgrep -P "$nspawn_pid" || { echo "no container PID 1"; return 1; }
	ct=$(pgrep -P "$nspawn_pid" | head -n1)
	wait_for 30 test -S "/proc/$ct/root/run/systemd/private" || { echo "systemd did not come up"; return 1; }
	local state
	state=$(T=60 ct_run systemctl is-system-running --wait)
	echo "detail: $state in $((SECONDS - start))s, PID 1 is $(ct_run ps -o comm= -p 1)"
	[ "$(ct_run ps -o comm= -p 1)" = systemd ] && { [ "$state" = running ] || [ "$state" = degraded ]; }
}

# shutdown: the background clients end and the container powers off.
shutdown() {
	local p
	for p in $(cat "$work/bg.pids" 2>/dev/null); do
		kill "$p" 2>/dev/null
	done
	: >"$work/bg.pids"
	if [ -n "$nspawn_pid" ] && kill -0 "$nspawn_pid" 2>/dev/null; then
		kill -TERM "$nspawn_pid" 2>/dev/null # nspawn powers the container off
		for _ in $(seq 100); do
			kill -0 "$nspawn_pid" 2>/dev/null || break
			sleep 0.2
		done
		kill -KILL "$nspawn_pid" 2>/dev/null
		wait "$nspawn_pid" 2>/dev/null
	fi
	nspawn_pid=
}

cleanup() {
	shutdown
	mountpoint -q "$work/rpmroot/root" 2>/dev/null && umount "$work/rpmroot/root"
	mountpoint -q "$work/rpmroot-envoy/root" 2>/dev/null && umount "$work/rpmroot-envoy/root"
	if [ "${E2E_KEEP:-0}" = 1 ] || mountpoint -q "$work/rpmroot/root" 2>/dev/null; then
		echo "logs kept in $work"
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT
trap 'echo "FAIL interrupted"; echo "$passed passed, $((failed + 1)) failed"; exit 130' INT TERM

# --- test data -----------------------------------------------------------------------------------

# bootstrap BODY [bad]: the e2e Envoy bootstrap answering BODY; "bad" adds a route to a cluster
# that does not exist.
bootstrap() {
	local extra=
	[ "${2:-}" = bad ] && extra='\n              - match: { prefix: "/bad" }\n                route: { cluster: does-not-exist }'
	sed -e "s/@BODY@/$1/" -e "s|@EXTRA_ROUTES@|$extra|" test/e2e/bootstrap.yaml.in
}

# put_bootstrap NAME: make /mnt/e2e/NAME.yaml Envoy's bootstrap (written in place: owner and mode
# stay the package's).
put_bootstrap() {
	ct_sh "cat /mnt/e2e/$1.yaml > /etc/envoy-agent/envoy.yaml"
}

# get PATH: one request from inside the container; prints "CODE BODY".
get() {
	ct_run curl -sS --max-time 10 -w ' %{http_code}' "$HTTP$1" | awk '{print $NF, $1}'
}

expect_body() { # expect_body [BODY]: a request answers 200 BODY (default: the current body)
	local got want=${1:-$(current)}
	got=$(get /)
	[ "$got" = "200 $want" ] || fail "GET / answered \"$got\", want \"200 $want\""
}

# current [BODY]: the body Envoy should be serving (set by the steps that change it), so that a
# step failing does not fail the ones after it for the same reason.
current() {
	if [ $# -gt 0 ]; then echo "$1" >"$work/current"; else cat "$work/current"; fi
}

# client_start NAME: a client inside the container sending requests back to back, one line
# "CODE BODY" per request, until client_stop.
client_start() {
	T=300 ct_sh "rm -f /run/e2e-client-stop; while [ ! -e /run/e2e-client-stop ]; do
		curl -s --max-time 5 -w ' %{http_code}\n' $HTTP/ | awk '{print \$NF, \$1}'
		sleep 0.02; done" >"$work/$1.client" 2>&1 &
	client_pid=$!
	echo "$client_pid" >>"$work/bg.pids"
	wait_for 10 test -s "$work/$1.client"
}

# client_stop NAME: stops the client; prints its counts and fails if any request failed.
client_stop() {
	# At least 10 answers before it stops: a step quicker than that (a dpkg -r on a busy
	# machine) counted 9 and failed as "too few requests".
	wait_for 30 has_lines "$work/$1.client" 10
	ct_sh "touch /run/e2e-client-stop"
	wait_for 15 gone "$client_pid" || kill "$client_pid" 2>/dev/null
	local total bad
	total=$(wc -l <"$work/$1.client")
	bad=$(grep -cvE '^200 v[12]$' "$work/$1.client")
	echo "detail: $total requests, $bad failed; $(sort "$work/$1.client" | uniq -c | awk '{printf "%s%s x%s", sep, $2" "$3, $1; sep=", "}')"
	[ "$total" -ge 10 ] || fail "too few requests"
	[ "$bad" -eq 0 ] || { grep -vE '^200 v[12]$' "$work/$1.client" | sort | uniq -c; fail "failed requests"; }
}

gone() { # gone PID: the process has exited
	! kill -0 "$1" 2>/dev/null
}

# A serving Envoy is the agent's child with --restart-epoch on its command line: the agent also
# runs the binary briefly as `envoy --version`, `--hot-restart-version` (when a package replaced
# it) and `--mode validate`, which a plain `pgrep -x envoy` would count too.
SERVING_ENVOY=' --restart-epoch [0-9]'

envoy_pid() { # the plain unit's running Envoy's PID (the newest, should there be two epochs)
	ct_run pgrep -n -P "$(prop MainPID)" -f -- "$SERVING_ENVOY"
}

# --- steps ---------------------------------------------------------------------------------------

prepare_share() {
	# `make package` builds every architecture; the containers run this machine's.
	deb=$(ls -t "$DIST"/envoy-agent_*_"$(dpkg --print-architecture)".deb 2>/dev/null | head -n1)
	rpm=$(ls -t "$DIST"/envoy-agent-*."$(uname -m)".rpm 2>/dev/null | head -n1)
	[ -n "$deb" ] || { echo "no $(dpkg --print-architecture) .deb in $DIST (run make package)"; return 1; }
	prepare_envoy_packages || return 1
	cp "$deb" "$share/envoy-agent.deb" || return 1
	bootstrap v1 >"$share/v1.yaml" && bootstrap v2 >"$share/v2.yaml" && bootstrap v2 bad >"$share/bad.yaml" || return 1
	prepare_scale || return 1
	# The upgrade: the same binary, packaged as a newer version.
	version=$(dpkg-deb -f "$deb" Version)
	upversion="${version%-*}.1"
	mkdir -p "$work/upgrade"
	PKG_STAGE=$PKG_STAGE timeout 300 go run ./packaging/cmd/mkpkg -config "$NFPM_CONFIG" \
		-version "$upversion" -binary "$BINARY" -out "$work/upgrade" || return 1
	cp "$work"/upgrade/envoy-agent_*.deb "$share/envoy-agent-upgrade.deb"
	echo "detail: $(basename "$deb"), upgrade to $upversion, Envoy packages $ENVOY_FROM and $ENVOY_TO"
}

# --- at scale: 1,000 certificates, 1,000 listeners ------------------------------------------------

SCALE=1000
SCALE_RENEWED=500  # the certificate renewed
SCALE_CERTS=/etc/envoy-agent/scale # where the container keeps the certificates

# prepare_scale: the certificates (one per name s<i>.test, and a renewal of s$SCALE_RENEWED.test
# whose subject says "renewed"), a bootstrap of one TLS listener on 8443 with a filter chain per
# name (SNI), each certificate named by file, and two bootstraps of $SCALE HTTP listeners (ports
# 10000 on) answering v1, the second with the last listener's route answering v2.
prepare_scale() {
	local d=$share/scale i last=$((SCALE - 1))
	mkdir -p "$d" || return 1
	command -v openssl >/dev/null || { echo "no openssl on the host"; return 1; }
	for i in $(seq 0 $last); do
		openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 -subj "/CN=s$i.test" \
			-keyout "$d/$i.key" -out "$d/$i.pem" 2>/dev/null || return 1
	done
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 -subj "/CN=s$SCALE_RENEWED.test renewed" \
		-keyout "$d/renewed.key" -out "$d/renewed.pem" 2>/dev/null || return 1
	{
		echo 'admin: { address: { pipe: { path: /run/envoy-agent/admin.sock, mode: 0600 } } }'
		echo 'static_resources:'
		echo '  listeners:'
		echo '  - name: e2e_tls'
		echo '    address: { socket_address: { address: 127.0.0.1, port_value: 8443 } }'
		echo '    listener_filters: [{ name: tls, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector } }]'
		echo '    filter_chains:'
		for i in $(seq 0 $last); do
			echo "    - filter_chain_match: { server_names: [s$i.test] }"
			echo "      transport_socket: { name: tls, typed_config: { \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext, common_tls_context: { tls_certificates: [{ certificate_chain: { filename: $SCALE_CERTS/$i.pem }, private_key: { filename: $SCALE_CERTS/$i.key } }] } } }"
			echo "      filters: [{ name: d, typed_config: { \"@type\": type.googleapis.com/envoy.extensions.filters.network.direct_response.v3.Config, response: { inline_string: s$i } } }]"
		done
	} >"$share/scale-certs.yaml" || return 1
	scale_listeners -1 >"$share/scale-listeners-v1.yaml" && scale_listeners $last >"$share/scale-listeners-v2.yaml"
}

# scale_listeners EDIT: $SCALE HTTP listeners e2e_<i> on 10000+i answering v1, but listener EDIT v2.
scale_listeners() {
	local i body
	echo 'admin: { address: { pipe: { path: /run/envoy-agent/admin.sock, mode: 0600 } } }'
	echo 'static_resources:'
	echo '  listeners:'
	for i in $(seq 0 $((SCALE - 1))); do
		body=v1
		[ "$i" = "$1" ] && body=v2
		cat <<-EOF
		  - name: e2e_$i
		    address:
		      socket_address: { address: 127.0.0.1, port_value: $((10000 + i)) }
		    filter_chains:
		    - filters:
		      - name: envoy.filters.network.http_connection_manager
		        typed_config:
		          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
		          stat_prefix: e2e_$i
		          route_config:
		            virtual_hosts:
		            - name: e2e
		              domains: ["*"]
		              routes:
		              - match: { prefix: "/" }
		                direct_response: { status: 200, body: { inline_string: "$body" } }
		          http_filters:
		          - name: envoy.filters.http.router
		            typed_config:
		              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
		EOF
	done
}

# tls_subject NAME: the subject of the certificate a new TLS handshake to 8443 for NAME gets.
tls_subject() {
	ct_sh "curl -sk -v --max-time 5 --resolve $1:8443:127.0.0.1 https://$1:8443/ 2>&1 | sed -n 's/^\*  *subject: //p'"
}

# scale_certificates: 1,000 certificates named by file, one a TLS filter chain (SNI): the packaged
# unit restarts into READY (systemctl restart returns at READY=1) and serves every name; a renewal
# of one (its files renamed into place) reaches new handshakes within 2 s, with the same Envoy and
# no reload; Envoy holds at most two inotify instances (its listener and cluster files). Before,
# 150 such certificates made the unit's Envoy abort at its start.
scale_certificates() {
	local start took pid names bad cur renewed
	ct_sh "rm -rf $SCALE_CERTS && cp -r /mnt/e2e/scale $SCALE_CERTS && chown -R root:envoy-agent $SCALE_CERTS &&
		chmod 0750 $SCALE_CERTS && chmod 0640 $SCALE_CERTS/*" || return 1
	ct_sh "cat /mnt/e2e/scale-certs.yaml > /etc/envoy-agent/envoy.yaml" || return 1
	cur=$(cursor)
	start=$(date +%s%N)
	T=180 ct_run systemctl restart "$UNIT" || { ct_run journalctl -u "$UNIT" -n 30 --no-pager; fail "restart with $SCALE certificates failed"; }
	took=$((($(date +%s%N) - start) / 1000000))
	unit_is active || fail "unit $(prop ActiveState)"
	pid=$(envoy_pid)
	echo "detail: systemctl restart ${took} ms (the stop's drain included), $(journal_after "$cur" | grep -o 'envoy is LIVE after [0-9.]*m*s' | tail -n1); Envoy pid $pid, RSS $(ct_sh "grep VmRSS /proc/$pid/status" | awk '{print $2}') KB, the agent's $(ct_sh "grep VmRSS /proc/$(prop MainPID)/status" | awk '{print $2}') KB, Envoy's inotify instances $(ct_sh "ls -l /proc/$pid/fd | grep -c inotify")"
	[ "$(ct_sh "ls -l /proc/$pid/fd | grep -c inotify")" -le 2 ] || fail "Envoy holds more than two inotify instances"
	bad=$(T=300 ct_sh "for i in \$(seq 0 $((SCALE - 1))); do curl -sk -v --max-time 5 --resolve s\$i.test:8443:127.0.0.1 https://s\$i.test:8443/ 2>&1 |
		grep -q \"subject: CN *= *s\$i.test\$\" || echo s\$i.test; done")
	[ -z "$bad" ] || fail "names not served their certificate: $(echo $bad | head -c 300)"
	echo "detail: all $SCALE names served their own certificate"
	cur=$(cursor)
	ct_sh "cp /mnt/e2e/scale/renewed.key $SCALE_CERTS/.k && cp /mnt/e2e/scale/renewed.pem $SCALE_CERTS/.c &&
		chown root:envoy-agent $SCALE_CERTS/.k $SCALE_CERTS/.c && chmod 0640 $SCALE_CERTS/.k $SCALE_CERTS/.c &&
		mv $SCALE_CERTS/.k $SCALE_CERTS/$SCALE_RENEWED.key && mv $SCALE_CERTS/.c $SCALE_CERTS/$SCALE_RENEWED.pem" || return 1
	start=$(date +%s%N)
	renewed=
	until [ $((($(date +%s%N) - start) / 1000000)) -gt 2000 ]; do
		case "$(tls_subject s$SCALE_RENEWED.test)" in *renewed*) renewed=$((($(date +%s%N) - start) / 1000000)); break ;; esac
	done
	[ -n "$renewed" ] || fail "2 s after the renewal s$SCALE_RENEWED.test gets \"$(tls_subject s$SCALE_RENEWED.test)\""
	echo "detail: renewal served to new handshakes after ${renewed} ms"
	[ "$(envoy_pid)" = "$pid" ] || fail "Envoy's pid changed: $pid -> $(envoy_pid)"
	journal_after "$cur" | grep -qi 'reload' && fail "a reload ran: $(journal_after "$cur" | grep -i reload | head -n 3)"
	case "$(tls_subject s0.test)" in *"CN = s0.test"* | *"CN=s0.test"*) ;; *) fail "s0.test after the renewal: $(tls_subject s0.test)" ;; esac
	unit_is active
}

# scale_routes: $SCALE HTTP listeners; a route edit of the last one is reloaded in place under a
# non-retrying load on that listener: 0 failed, the same Envoy pid (before, only the first 32
# connection managers' routes changed in place, and this edit hot-restarted Envoy).
scale_routes() {
	local pid cur out last=$((SCALE - 1))
	ct_sh "cat /mnt/e2e/scale-listeners-v1.yaml > /etc/envoy-agent/envoy.yaml" || return 1
	T=180 ct_run systemctl restart "$UNIT" || { ct_run journalctl -u "$UNIT" -n 30 --no-pager; fail "restart with $SCALE listeners failed"; }
	pid=$(envoy_pid)
	HTTP=http://127.0.0.1:$((10000 + last)) client_start scale || return 1
	ct_sh "cat /mnt/e2e/scale-listeners-v2.yaml > /etc/envoy-agent/envoy.yaml" || return 1
	cur=$(cursor)
	T=120 ct_run systemctl reload "$UNIT" || { client_stop scale; fail "the reload failed"; }
	out=$(journal_after "$cur")
	sleep 1
	client_stop scale || return 1
	grep -qx '200 v2' "$work/scale.client" || fail "the last listener never answered v2"
	echo "detail: $(grep -o 'reloaded in place[^"]*' <<<"$out" | head -n1); $(grep -o 'in_place_ms=[0-9.]*\|validate_ms=[0-9.]*\|took_ms=[0-9]*' <<<"$out" | tr '\n' ' ')"
	grep -q "reloaded in place: routes updated e2e_$last/0/0" <<<"$out" || { echo "$out" | tail -n 20; fail "the route edit of the last listener was not made in place"; }
	[ "$(envoy_pid)" = "$pid" ] || fail "Envoy's pid changed: $pid -> $(envoy_pid)"
	unit_is active
}

# scale_undo: the e2e bootstrap back, the unit restarted, whatever the scale steps did.
scale_undo() {
	put_bootstrap "$(current)" || return 1
	ct_sh "rm -rf $SCALE_CERTS"
	T=120 ct_run systemctl restart "$UNIT" || { ct_run journalctl -u "$UNIT" -n 30 --no-pager; return 1; }
	wait_for 60 unit_is active || fail "unit $(prop ActiveState)"
	expect_body
}

unit_security() {
	local out score
	out=$(systemd-analyze security --offline=yes --no-pager systemd/envoy-agent.service 2>&1) || { echo "$out"; return 1; }
	score=$(echo "$out" | sed -n 's/.*Overall exposure level for envoy-agent.service: \([0-9.]* [A-Z]*\).*/\1/p')
	echo "detail: $score"
	case "$score" in
	*" OK" | *" SAFE" | *" PERFECT") ;;
	*) echo "$out" | grep '✗'; fail "exposure \"$score\" is worse than OK" ;;
	esac
}

# dpkg -i and -P in the rootfs with no systemd running (as in an image build): must succeed,
# create the user, enable the unit, start nothing.
offline_install() {
	timeout 120 systemd-nspawn -D "$ROOTFS" --register=no --keep-unit --volatile=overlay --private-network \
		--machine="envoy-agent-e2e-offline-$$" --bind-ro="$share:/mnt/e2e" --pipe /bin/sh -exc '
		test ! -d /run/systemd/system
		dpkg -i /mnt/e2e/envoy-agent.deb
		getent passwd envoy-agent
		test -L /etc/systemd/system/multi-user.target.wants/envoy-agent.service
		test -z "$(pgrep -x envoy-agent)"
		dpkg -P envoy-agent
		test -z "$(getent passwd envoy-agent)"
		test -z "$(pgrep -x envoy)"
		test ! -e /etc/systemd/system/multi-user.target.wants/envoy-agent.service
		test ! -e /etc/envoy-agent' </dev/null
}

# Both packages in one dpkg run, as `apt install ./envoy_*.deb ./envoy-agent_*.deb` does.
install_deb() {
	dpkg_ct -i /mnt/e2e/envoy-from.deb /mnt/e2e/envoy-agent.deb || return 1
	echo "detail: $(ct_run dpkg-query -W -f '${Package} ${Version}, ' envoy envoy-agent)$(ct_run envoy --version | grep -o 'version: [^ ]*')"
}

enabled_active() {
	local enabled
	enabled=$(ct_run systemctl is-enabled "$UNIT")
	wait_for 60 unit_is active
	echo "detail: $enabled, $(prop ActiveState) ($(prop SubState)), MainPID $(prop MainPID) user $(ct_run ps -o user= -p "$(prop MainPID)")"
	[ "$enabled" = enabled ] && unit_is active
}

verify_in_container() {
	local out
	out=$(ct_run systemd-analyze verify "/usr/lib/systemd/system/$UNIT" 2>&1)
	local rc=$?
	echo "$out"
	[ $rc -eq 0 ] && ! grep -q envoy-agent <<<"$out"
}

status_text() {
	local s
	s=$(prop StatusText)
	echo "detail: StatusText=\"$s\""
	[ -n "$s" ]
}

# The admin's edits: the e2e bootstrap (a listener on port 80), and drain settings short enough
# for a test. Kept through the upgrade below.
edit_config() {
	ct_sh 'set -e
		c=/etc/envoy-agent/config.toml
		sed -i -e "s/^\([[:space:]]*drain_duration[[:space:]]*=\).*/\1 \"3s\"/" \
		       -e "s/^\([[:space:]]*parent_shutdown_duration[[:space:]]*=\).*/\1 \"6s\"/" \
		       -e "s/^\([[:space:]]*termination_drain_duration[[:space:]]*=\).*/\1 \"20s\"/" \
		       -e "s/^\([[:space:]]*min_drain_duration[[:space:]]*=\).*/\1 \"1s\"/" \
		       -e "s/^\([[:space:]]*exit_on_zero_active_connections[[:space:]]*=\).*/\1 true/" "$c"
		echo "# edited by the e2e test" >> "$c"
		grep -q "^[[:space:]]*termination_drain_duration[[:space:]]*= \"20s\"" "$c"
		grep -q "^[[:space:]]*exit_on_zero_active_connections[[:space:]]*= true" "$c"' || return 1
	put_bootstrap v1 || return 1
	T=120 ct_run systemctl restart "$UNIT" || { ct_run journalctl -u "$UNIT" -n 30 --no-pager; return 1; }
	expect_body v1 && current v1
}

has_reload() { # the installed binary has the reload command
	ct_run envoy-agent help 2>&1 | grep -w reload >/dev/null || fail "envoy-agent has no reload command (yet)"
}

reload_good() {
	has_reload
	client_start reload || return 1
	put_bootstrap v2 || return 1
	local start=$SECONDS rc
	T=120 ct_run systemctl reload "$UNIT"
	rc=$?
	echo "detail: systemctl reload exit $rc in $((SECONDS - start))s"
	[ $rc -eq 0 ] || { client_stop reload; ct_run journalctl -u "$UNIT" -n 30 --no-pager; return 1; }
	expect_body v2 || { client_stop reload; return 1; }
	current v2
	sleep 2
	client_stop reload || return 1
	grep -qx '200 v1' "$work/reload.client" && grep -qx '200 v2' "$work/reload.client" ||
		fail "the client did not see the switch from v1 to v2"
	echo "detail: StatusText=\"$(prop StatusText)\""
	unit_is active
}

reload_bad() {
	has_reload
	client_start badreload || return 1
	put_bootstrap bad || return 1
	local rc
	T=120 ct_run systemctl reload "$UNIT"
	rc=$?
	sleep 1
	echo "detail: systemctl reload exit $rc, unit $(prop ActiveState), StatusText=\"$(prop StatusText)\""
	client_stop badreload
	local crc=$?
	put_bootstrap "$(current)"
	[ $rc -ne 0 ] || fail "systemctl reload succeeded with a bad bootstrap"
	[ $crc -eq 0 ] || fail "requests failed"
	unit_is active || fail "unit $(prop ActiveState)"
	! grep -vqx "200 $(current)" "$work/badreload.client" || fail "the served config changed"
	expect_body
}

# reload_bad_after_good: a bad bootstrap right after a good reload, while the replaced epoch still
# serves a slow request (so a reload that waited for it first would block for seconds): systemctl
# reload fails in under 2 s (the reload validates before it waits), the slow request completes and
# the good configuration keeps serving.
reload_bad_after_good() {
	local from to t0 t1 rc ms
	from=$(current)
	to=v1
	[ "$from" != v1 ] || to=v2
	ct_run curl -sS --max-time 30 -o /dev/null -w '%{http_code}' \
		-H 'x-envoy-fault-delay-request: 5500' "$HTTP/slow" >"$work/badafter.out" 2>&1 &
	local held=$!
	echo "$held" >>"$work/bg.pids"
	wait_for 5 rq_active || fail "the held request never became active"
	put_bootstrap "$to" || return 1
	T=120 ct_run systemctl reload "$UNIT" || { put_bootstrap "$from"; fail "the good reload failed"; }
	current "$to"
	put_bootstrap bad || return 1
	t0=$(date +%s%N)
	T=120 ct_run systemctl reload "$UNIT"
	rc=$?
	t1=$(date +%s%N)
	ms=$(((t1 - t0) / 1000000))
	put_bootstrap "$to"
	local still=no
	kill -0 "$held" 2>/dev/null && still=yes
	wait "$held"
	echo "detail: bad reload right after a good one: exit $rc in $ms ms; the replaced epoch's slow request still in flight then: $still, answered $(cat "$work/badafter.out")"
	[ $rc -ne 0 ] || fail "systemctl reload succeeded with a bad bootstrap"
	[ "$still" = yes ] || fail "the slow request had ended before the bad reload did: nothing measured"
	[ "$ms" -lt 2000 ] || fail "the bad reload took $ms ms: it must be refused before any wait for the draining epoch"
	[ "$(cat "$work/badafter.out")" = 200 ] || fail "the slow request on the replaced epoch did not complete"
	unit_is active || fail "unit $(prop ActiveState)"
	expect_body
}

# reload_in_place (issue 33): the packaged unit, with no reload_method in its config.toml (the
# default, "auto"), runs Envoy from resource files, and a reload of a changed route is made in
# place under the non-retrying load: 0 failed, the same Envoy pid, and the journal has the answer
# "reloaded in place: routes updated". Then reload_method = "hot_restart" is set by a reload (the
# key is not restart-only: that reload starts a new epoch, which runs the bootstrap as it is).
# reload_in_place_undo puts the configuration back byte for byte and restarts the unit, whatever
# this step did, so that the later steps run as before.
CONFIG_SAVED=/run/e2e-config.toml.orig
reload_in_place() {
	has_reload
	local c=/etc/envoy-agent/config.toml from to cur pid0 pid1 out hr
	from=$(current)
	to=v1
	[ "$from" != v1 ] || to=v2
	ct_run cp -p "$c" "$CONFIG_SAVED" || return 1
	ct_sh "! grep -q '^[[:space:]]*reload_method' $c && grep -q '^\[agent\]\$' $c" || fail "no [agent] table, or reload_method set, in $c"
	ct_sh 'ls -d /run/envoy-agent/epoch-*.yaml.d' >/dev/null || fail "the packaged unit's Envoy does not run from resource files (no epoch folder in /run/envoy-agent)"
	client_start inplace || return 1
	pid0=$(envoy_pid)
	# The route changed: in place, the same Envoy.
	put_bootstrap "$to" || return 1
	cur=$(cursor)
	T=120 ct_run systemctl reload "$UNIT" || { put_bootstrap "$from"; client_stop inplace; fail "the in-place reload failed"; }
	current "$to"
	out=$(journal_after "$cur")
	pid1=$(envoy_pid)
	expect_body "$to" || { client_stop inplace; return 1; }
	# reload_method = "hot_restart", set by a reload: a new epoch.
	ct_sh "sed -i 's/^\[agent\]\$/[agent]\nreload_method = \"hot_restart\"/' $c" || { client_stop inplace; return 1; }
	cur=$(cursor)
	T=120 ct_run systemctl reload "$UNIT" || { client_stop inplace; fail "the reload that sets reload_method failed"; }
	hr=$(journal_after "$cur")
	sleep 1
	client_stop inplace || return 1
	grep -qx "200 $from" "$work/inplace.client" && grep -qx "200 $to" "$work/inplace.client" ||
		fail "the client did not see the switch from $from to $to"
	echo "detail: $(grep -o 'reloaded in place: [^"]*' <<<"$out" | head -n1); Envoy pid $pid0 -> $pid1"
	grep -q 'reloaded in place: routes updated e2e_http/0/0; epoch [0-9]* keeps serving' <<<"$out" ||
		{ echo "$out" | tail -n 20; fail "the reload of a changed route did not say it was made in place"; }
	[ -n "$pid0" ] && [ "$pid0" = "$pid1" ] || fail "Envoy's pid changed: $pid0 -> $pid1"
	echo "detail: setting reload_method = \"hot_restart\": $(grep -o 'reloaded: epoch [0-9]* is serving[^"]*' <<<"$hr" | head -n1)"
	grep -q 'reloaded: epoch [0-9]* is serving' <<<"$hr" || { echo "$hr" | tail -n 20; fail "the reload that sets reload_method = \"hot_restart\" did not start a new epoch"; }
	unit_is active
}

reload_in_place_undo() {
	local c=/etc/envoy-agent/config.toml
	ct_run test -f "$CONFIG_SAVED" || fail "no saved $c: reload_in_place did not run"
	ct_sh "cat $CONFIG_SAVED > $c && cmp $CONFIG_SAVED $c && rm -f $CONFIG_SAVED" || fail "$c not put back"
	ct_sh "! grep -q '^[[:space:]]*reload_method' $c" || fail "reload_method still in $c"
	put_bootstrap "$(current)" || return 1
	T=120 ct_run systemctl restart "$UNIT" || { ct_run journalctl -u "$UNIT" -n 30 --no-pager; return 1; }
	wait_for 60 unit_is active || fail "unit $(prop ActiveState)"
	ct_sh 'ls -d /run/envoy-agent/epoch-*.yaml.d' >/dev/null || fail "Envoy does not run from resource files again"
	echo "detail: $c as before (cmp), restarted: MainPID $(prop MainPID), Envoy pid $(envoy_pid)"
	expect_body
}

# local_doors: Envoy's hot-restart sockets are files in /run/envoy-agent, mode 0600, no abstract
# Envoy socket is bound, and Envoy's shared memory is in the unit's own /dev/shm, not the host's.
local_doors() {
	local perms pid
	perms=$(ct_sh 'stat -c "%A %U" /run/envoy-agent/hot-restart_* | sort -u')
	echo "detail: hot-restart sockets: $perms"
	[ "$perms" = "srw------- envoy-agent" ] || fail "hot-restart sockets: $perms"
	ct_sh 'grep -q "@envoy_domain_socket" /proc/net/unix' && fail "an abstract Envoy socket is bound"
	ct_sh 'ls /dev/shm/envoy_shared_memory_* 2>/dev/null' && fail "Envoy's shared memory is in the host's /dev/shm"
	pid=$(ct_run systemctl show -p MainPID --value envoy-agent)
	echo "detail: the unit's /dev/shm: $(ct_sh "ls /proc/$pid/root/dev/shm" | tr '\n' ' ')"
	ct_sh "ls /proc/$pid/root/dev/shm" | grep -q '^envoy_shared_memory_' || fail "no shared memory in the unit's /dev/shm"
}

# control_socket_operators: the control socket in /run/envoy-agent is the service's, mode 0660;
# nobody cannot quit, drain or reload through it; a member of the service group can reload.
control_socket_operators() {
	local sock=/run/envoy-agent/control.sock perms route out
	perms=$(ct_run stat -c '%A %U:%G' "$sock") || fail "no control socket at $sock"
	echo "detail: $sock $perms"
	[ "$perms" = "srw-rw---- envoy-agent:envoy-agent" ] || fail "control socket is $perms"
	# curl exits 7 when it cannot connect (here: no search permission on /run/envoy-agent).
	for route in quitquitquit drain reload; do
		out=$(ct_run setpriv --reuid=nobody --regid=nogroup --clear-groups \
			curl -sS --max-time 10 --unix-socket "$sock" -X POST "http://envoy-agent/$route" 2>&1)
		[ $? -eq 7 ] || fail "nobody's POST /$route: $out"
	done
	ct_run setpriv --reuid=nobody --regid=nogroup --clear-groups test -x /run/envoy-agent &&
		fail "nobody can enter /run/envoy-agent"
	out=$(ct_run setpriv --reuid=nobody --regid=nogroup --clear-groups \
		envoy-agent reload --config /etc/envoy-agent/config.toml 2>&1) && fail "nobody reloaded: $out"
	unit_is active || fail "unit $(prop ActiveState) after nobody's attempts"
	expect_body || return 1
	out=$(T=120 ct_run setpriv --reuid=nobody --regid=nogroup --groups=envoy-agent \
		envoy-agent reload --config /etc/envoy-agent/config.toml 2>&1) || fail "the service group could not reload: $out"
	echo "detail: group member: $out"
	expect_body
}

stop_draining() {
	local since
	since=$(cursor)
	ct_run curl -sS --max-time 30 -w ' %{http_code} %{time_total}s' \
		-H 'x-envoy-fault-delay-request: 4000' "$HTTP/slow" >"$work/slow.out" 2>&1 &
	local slow=$!
	echo "$slow" >>"$work/bg.pids"
	wait_for 5 rq_active || fail "the slow request never became active"
	local start=$SECONDS rc
	T=90 ct_run systemctl stop "$UNIT"
	rc=$?
	local took=$((SECONDS - start))
	wait_for 30 gone "$slow"
	local result
	result=$(prop Result)
	echo "detail: stop exit $rc in ${took}s, Result=$result, slow request: $(cat "$work/slow.out")"
	journal_after "$since" >"$work/stop.journal"
	[ $rc -eq 0 ] || fail "systemctl stop failed"
	grep -q "^$(current) 200 " "$work/slow.out" || fail "the in-flight request did not complete"
	[ "$result" = success ] || fail "unit result $result"
	unit_is inactive || fail "unit is $(prop ActiveState)"
	echo "detail: journal: $(grep -i -m1 drain "$work/stop.journal")"
	grep -qi drain "$work/stop.journal" || { tail -n 20 "$work/stop.journal"; fail "no drain in the journal"; }
	! ct_run pgrep -x envoy || fail "an Envoy is still running"
}

# Issue 20, item 6: a request held on the old epoch, a reload, a stop 1 s later with
# exit_on_zero_active_connections: the drain counts the old epoch's connection from the kernel (a
# sock_diag dump, allowed by the unit) and ends within a poll (250 ms) of its close. Envoy's stats would see it until their next flush
# (5 s). The bound is loose against a loaded machine, well under the stats' lag. Starts the unit
# again afterwards.
stop_after_reload() {
	local t0 rc rq_end stop_end
	ct_run curl -sS --max-time 30 -o /dev/null -w '%{http_code}' \
		-H 'x-envoy-fault-delay-request: 5500' "$HTTP/slow" >"$work/held.out" 2>&1 &
	local held=$!
	echo "$held" >>"$work/bg.pids"
	wait_for 5 rq_active || fail "the held request never became active"
	T=120 ct_run systemctl reload "$UNIT" || fail "systemctl reload failed"
	sleep 1
	t0=$(date +%s%N)
	T=90 ct_run systemctl stop "$UNIT" &
	local stopper=$!
	wait "$held"
	rq_end=$(date +%s%N)
	wait "$stopper"
	rc=$?
	stop_end=$(date +%s%N)
	echo "detail: held request $(cat "$work/held.out"), closed $(((rq_end - t0) / 1000000)) ms into the stop; stop exit $rc after $(((stop_end - t0) / 1000000)) ms, $(((stop_end - rq_end) / 1000000)) ms after the held request closed"
	T=120 ct_run systemctl start "$UNIT" || fail "the unit did not start again"
	[ "$(cat "$work/held.out")" = 200 ] || fail "the held request did not complete"
	[ $rc -eq 0 ] || fail "systemctl stop failed"
	[ "$rq_end" -gt "$t0" ] || fail "the held request ended before the stop began (a slow reload): nothing measured"
	[ $(((stop_end - rq_end) / 1000000)) -lt 1000 ] || fail "the stop ended more than 1 s after the last request (Envoy's stats lag up to 5 s)"
	# The polls used sock_diag (AF_NETLINK is in the unit's RestrictAddressFamilies=): the agent
	# says once when it falls back to /proc.
	! ct_run journalctl -u "$UNIT" --no-pager -o cat | grep 'connection count: ' || fail "the connection count fell back to /proc inside the unit"
}

rq_active() { # a request is in flight: Envoy counts it as active
	ct_run curl -s --unix-socket /run/envoy-agent/admin.sock "http://envoy/stats?filter=http.e2e.downstream_rq_active" | grep ': [1-9]' >/dev/null
}

restarts_above() { # restarts_above N: the unit restarted more than N times
	[ "$(prop NRestarts)" -gt "$1" ]
}

# restarted_by_itself SIGNAL SECONDS: send SIGNAL to Envoy; the unit must restart on its own.
restarted_by_itself() {
	local sig=$1 limit=$2
	unit_is active || { T=120 ct_run systemctl start "$UNIT" && wait_for 30 unit_is active; } || return 1
	local n0 pid0 epid start=$SECONDS
	n0=$(prop NRestarts)
	pid0=$(prop MainPID)
	epid=$(envoy_pid) || fail "no Envoy running"
	ct_run kill -s "$sig" "$epid" || return 1
	wait_for "$limit" restarts_above "$n0" ||
		{ ct_run journalctl -u "$UNIT" -n 20 --no-pager; fail "no restart within ${limit}s"; }
	wait_for 60 unit_is active || fail "unit not active again"
	echo "detail: restarted after $((SECONDS - start))s, NRestarts $n0 -> $(prop NRestarts), MainPID $pid0 -> $(prop MainPID)"
	[ "$(prop MainPID)" != "$pid0" ] && expect_body || return 1
	# envoy-agent status shows systemd's own restart count and how the previous run ended.
	local st n
	n=$(prop NRestarts)
	st=$(ct_run envoy-agent status 2>&1) || true
	echo "$st" | grep -q "restarted $n times by systemd (NRestarts)" || fail "status does not show NRestarts $n: $st"
	echo "$st" | grep -q "last exit:" || fail "status does not show how the previous run ended: $st"
	echo "detail: status: $(echo "$st" | grep -E 'unit:|last exit:' | tr -s ' ' | tr '\n' ';')"
}

kill9() {
	restarted_by_itself KILL 60
}

# After the watchdog fires, `journalctl -p err` names the cause in one line of the agent's (what
# stopped answering, for how long), and no Go stack dump is in the journal (WatchdogSignal=SIGABRT
# is taken by the agent: docs/design.md, section 9).
sigstop() {
	local since epoch
	since=$(cursor)
	epoch=$(ct_run date +%s) || return 1 # --since for -p: see journal_priorities
	restarted_by_itself STOP 90 || return 1
	journal_after "$since" >"$work/sigstop.journal"
	grep 'Watchdog timeout' "$work/sigstop.journal" | sed 's/^/journal: /'
	grep -q 'Watchdog timeout' "$work/sigstop.journal" || fail "the restart was not the watchdog's"
	ct_run journalctl -u "$UNIT" -p err --since "@$epoch" --no-pager -o short-monotonic >"$work/sigstop.err"
	sed 's/^/-p err: /' "$work/sigstop.err"
	local agent_err
	agent_err=$(grep -v ' systemd\[1\]: ' "$work/sigstop.err" | grep -v '^-- ')
	[ "$(grep -c . <<<"$agent_err")" -eq 1 ] || fail "want one error line of the agent's, got: $agent_err"
	grep -q 'does not answer GET /ready.*no answer for [0-9.]*s' <<<"$agent_err" || fail "the error line does not name the cause"
	echo "detail: -p err: $(sed 's/.*level=error msg="//' <<<"$agent_err" | cut -c1-120)..."
	! grep -e '^goroutine ' -e 'SIGABRT: abort' "$work/sigstop.journal" || fail "a Go stack dump in the journal"
}

upgrade() {
	local before after pid0 v
	before=$(ct_sh 'sha256sum /etc/envoy-agent/config.toml /etc/envoy-agent/envoy.yaml') || return 1
	pid0=$(prop MainPID)
	T=180 ct_run dpkg -i /mnt/e2e/envoy-agent-upgrade.deb </dev/null || return 1
	after=$(ct_sh 'sha256sum /etc/envoy-agent/config.toml /etc/envoy-agent/envoy.yaml')
	v=$(ct_run dpkg-query -W -f '${Version}' envoy-agent)
	wait_for 60 unit_is active
	echo "detail: $version -> $v, MainPID $pid0 -> $(prop MainPID), $(ct_run systemctl is-enabled "$UNIT")"
	[ "$v" = "$(dpkg-deb -f "$share/envoy-agent-upgrade.deb" Version)" ] || fail "version $v after the upgrade"
	[ "$before" = "$after" ] || { echo "$before"; echo "$after"; fail "the edited configuration changed"; }
	ct_run grep -q '^# edited by the e2e test' /etc/envoy-agent/config.toml || fail "the edit is gone"
	! ct_sh 'ls /etc/envoy-agent/*.dpkg-* 2>/dev/null | grep .' || fail "dpkg left .dpkg-* files"
	# The agent hands Envoy over in place (issue 15): the same MainPID, not a restart.
	unit_is active && [ "$(prop MainPID)" = "$pid0" ] || fail "the unit was restarted, not handed over live"
	[ "$(ct_run systemctl is-enabled "$UNIT")" = enabled ] && expect_body
}

# --- live upgrade (issue 15) ---------------------------------------------------------------------

# prepare_live_upgrade: packages for the live-upgrade steps. B is this branch's agent built with
# its own version string (so `envoy-agent version` shows the switch); "broken" is a newer package
# whose /usr/bin/envoy-agent exits 1 at once. Both as .deb and .rpm.
prepare_live_upgrade() {
	[ -n "${version:-}" ] || { echo "prepare_share did not run"; return 1; }
	livever="${version%-*}.2"
	brokenver="${version%-*}.3"
	mkdir -p "$work/live" "$work/broken"
	live2ver="${version%-*}.6"
	# Pure Go, as the packaged binary: it runs on every release's glibc.
	CGO_ENABLED=0 go build -ldflags "-X main.version=$livever" -o "$work/envoy-agent-live" ./cmd/envoy-agent || return 1
	CGO_ENABLED=0 go build -ldflags "-X main.version=$live2ver" -o "$work/envoy-agent-live2" ./cmd/envoy-agent || return 1
	mkdir -p "$work/live2"
	PKG_STAGE=$PKG_STAGE timeout 300 go run ./packaging/cmd/mkpkg -config "$NFPM_CONFIG" -formats deb \
		-version "$live2ver" -binary "$work/envoy-agent-live2" -out "$work/live2" || return 1
	cp "$work"/live2/envoy-agent_*.deb "$share/envoy-agent-live2.deb" || return 1
	printf '#!/bin/sh\necho "envoy-agent: broken build" >&2\nexit 1\n' >"$work/envoy-agent-broken"
	chmod 0755 "$work/envoy-agent-broken"
	PKG_STAGE=$PKG_STAGE timeout 300 go run ./packaging/cmd/mkpkg -config "$NFPM_CONFIG" \
		-version "$livever" -binary "$work/envoy-agent-live" -out "$work/live" || return 1
	PKG_STAGE=$PKG_STAGE timeout 300 go run ./packaging/cmd/mkpkg -config "$NFPM_CONFIG" \
		-version "$brokenver" -binary "$work/envoy-agent-broken" -out "$work/broken" || return 1
	cp "$work"/live/envoy-agent_*.deb "$share/envoy-agent-live.deb" &&
		cp "$work"/broken/envoy-agent_*.deb "$share/envoy-agent-broken.deb" &&
		cp "$work"/live/envoy-agent-*.rpm "$share/envoy-agent-live.rpm" &&
		cp "$work"/broken/envoy-agent-*.rpm "$share/envoy-agent-broken.rpm" &&
		cp "$rpm" "$share/envoy-agent.rpm" || return 1
	echo "detail: live upgrade to $livever, broken package $brokenver, upgrade with an instance to $live2ver"
}

envoy_started() { # envoy_started PID: the process's start time, in clock ticks since boot
	ct_sh "cut -d' ' -f22 /proc/$1/stat"
}

envoy_count() { # the plain unit's Envoy processes
	ct_run pgrep -c -P "$(prop MainPID)" -f -- "$SERVING_ENVOY"
}

# upgrade_live PACKAGE: install PACKAGE (dpkg -i, or rpm -U for a .rpm) under load; the agent
# must hand Envoy over in place: same MainPID, same Envoy process, zero failed requests.
upgrade_live() {
	local pkg=$1 want=$2 pid0 epid0 est0 since rc v status n
	unit_is active || { T=120 ct_run systemctl start "$UNIT" && wait_for 60 unit_is active; } || return 1
	pid0=$(prop MainPID)
	epid0=$(envoy_pid) || fail "no Envoy running"
	est0=$(envoy_started "$epid0")
	since=$(cursor)
	client_start live || return 1
	sleep 1
	case $pkg in
	*.deb) T=180 ct_run dpkg -i "/mnt/e2e/$pkg" </dev/null >"$work/live.dpkg" 2>&1 ;;
	*.rpm) T=180 ct_run rpm -U --nodeps "/mnt/e2e/$pkg" </dev/null >"$work/live.dpkg" 2>&1 ;;
	esac
	rc=$?
	case $pkg in *.deb) sed "s|^|[$release dpkg -i $pkg] |" "$work/live.dpkg" >>"$work/dpkg-all.log" ;; esac
	sleep 1
	client_stop live
	local crc=$?
	cat "$work/live.dpkg"
	v=$(ct_run envoy-agent version)
	status=$(prop StatusText)
	n=$(envoy_count)
	journal_after "$since" >"$work/live.journal"
	echo "detail: $v; MainPID $pid0 -> $(prop MainPID); Envoy pid $epid0 -> $(envoy_pid) (started at tick $est0 -> $(envoy_started "$epid0")); $n Envoy; StatusText=\"$status\""
	grep -m1 'handing Envoy' "$work/live.journal" | sed 's/^/journal: /'
	[ $rc -eq 0 ] || fail "the package install failed"
	[ $crc -eq 0 ] || fail "requests failed during the upgrade"
	[ "$v" = "envoy-agent $want" ] || fail "envoy-agent version says \"$v\", want $want"
	[ "$(prop MainPID)" = "$pid0" ] || fail "MainPID changed: the unit was restarted"
	[ "$(envoy_pid)" = "$epid0" ] && [ "$(envoy_started "$epid0")" = "$est0" ] || fail "Envoy was not kept"
	[ "$n" = 1 ] || fail "$n Envoy processes"
	case $status in *"adopted epoch"*) ;; *) fail "StatusText does not name the adoption" ;; esac
	grep -q 'handing Envoy' "$work/live.journal" || fail "no handover in the journal"
	unit_is active && expect_body
}

# upgrade_broken PACKAGE: a package whose agent binary exits 1 at once. The install must not
# stop the serving agent: same MainPID, same Envoy, traffic served, the refusal in STATUS=.
upgrade_broken() {
	local pkg=$1 pid0 epid0 since rc status
	pid0=$(prop MainPID)
	epid0=$(envoy_pid) || fail "no Envoy running"
	since=$(cursor)
	client_start broken || return 1
	sleep 1
	case $pkg in
	*.deb) T=180 ct_run dpkg -i "/mnt/e2e/$pkg" </dev/null >"$work/broken.dpkg" 2>&1 ;;
	*.rpm) T=180 ct_run rpm -U --nodeps "/mnt/e2e/$pkg" </dev/null >"$work/broken.dpkg" 2>&1 ;;
	esac
	rc=$?
	sleep 1
	client_stop broken
	local crc=$?
	status=$(prop StatusText)
	sed 's/^/install: /' "$work/broken.dpkg"
	journal_after "$since" >"$work/broken.journal"
	grep -m1 'upgrade refused' "$work/broken.journal" | sed 's/^/journal: /'
	echo "detail: install exit $rc; MainPID $pid0 -> $(prop MainPID); Envoy pid $epid0 -> $(envoy_pid); StatusText=\"$status\""
	[ $crc -eq 0 ] || fail "requests failed"
	[ "$(prop MainPID)" = "$pid0" ] && unit_is active || fail "the agent was replaced or stopped"
	[ "$(envoy_pid)" = "$epid0" ] || fail "Envoy was not kept"
	case $status in *"upgrade refused"*) ;; *) fail "StatusText does not say the upgrade was refused" ;; esac
	grep -q 'upgrade refused' "$work/broken.journal" || fail "no refusal in the journal"
	expect_body
}

# prepare_fallback: a package of the agent as it was before live upgrades (the parent of the
# commit that added envoy/forker.go), with that tree's own scripts (its postinst restarts), and a
# newer one of B: upgrading from the first to the second must fall back to a drained restart.
prepare_fallback() {
	local added base old=$work/pre-live
	added=$(git log --diff-filter=A --format=%H -- envoy/forker.go | tail -n1)
	[ -n "$added" ] || { echo "no commit adds envoy/forker.go"; return 1; }
	base=$(git rev-parse "$added^") || return 1
	mkdir -p "$old/tree" "$old/out" "$work/fallback"
	git archive "$base" | tar -x -C "$old/tree" || return 1
	(cd "$old/tree" && go build -ldflags "-X main.version=pre-live" -o "$old/envoy-agent" ./cmd/envoy-agent &&
		PKG_STAGE=$repo/$PKG_STAGE timeout 300 go run ./packaging/cmd/mkpkg -config packaging/nfpm.yaml \
			-version "${version%-*}.4" -binary "$old/envoy-agent" -out "$old/out") || return 1
	PKG_STAGE=$PKG_STAGE timeout 300 go run ./packaging/cmd/mkpkg -config "$NFPM_CONFIG" \
		-version "${version%-*}.5" -binary "$work/envoy-agent-live" -out "$work/fallback" || return 1
	cp "$old"/out/envoy-agent_*.deb "$share/envoy-agent-pre-live.deb" &&
		cp "$work"/fallback/envoy-agent_*.deb "$share/envoy-agent-fallback.deb" || return 1
	echo "detail: pre-live agent from $(git rev-parse --short "$base")"
}

# upgrade_fallback: the running agent predates live upgrades (installed from the pre-live
# package), so the upgrade to B restarts the unit (a drain) and says why.
upgrade_fallback() {
	local pid0 out
	# The pre-live agent predates envoy.admin_socket (a TCP admin on loopback, which both accept)
	# and agent.control_socket.
	ct_sh "sed -i -e 's|^admin_socket *=.*|admin_port = 15000|' -e 's|^control_socket *=|# control_socket =|' /etc/envoy-agent/config.toml &&
		sed -i 's|pipe: { path: /run/envoy-agent/admin.sock, mode: 0600 }|socket_address: { address: 127.0.0.1, port_value: 15000 }|' /etc/envoy-agent/envoy.yaml" || return 1
	# Its package ships the older example files: keep the files as they are here.
	out=$(T=180 ct_run dpkg --force-confdef --force-confold -i /mnt/e2e/envoy-agent-pre-live.deb </dev/null 2>&1) ||
		{ echo "$out"; ct_run journalctl -u "$UNIT" -n 20 --no-pager; return 1; }
	wait_for 60 unit_is active || fail "the pre-live agent is not active"
	[ "$(ct_run envoy-agent version)" = "envoy-agent pre-live" ] || fail "the pre-live agent is not installed"
	pid0=$(prop MainPID)
	out=$(T=180 ct_run dpkg --force-confdef --force-confold -i /mnt/e2e/envoy-agent-fallback.deb </dev/null 2>&1) || { echo "$out"; return 1; }
	echo "$out" | grep -i 'hand over' | sed 's/^/dpkg: /'
	wait_for 60 unit_is active || fail "not active after the fallback restart"
	echo "detail: $(ct_run envoy-agent version); MainPID $pid0 -> $(prop MainPID); StatusText=\"$(prop StatusText)\""
	grep -q 'cannot hand over; falling back to a restart' <<<"$out" || fail "dpkg's output does not name the fallback"
	# The scripts also log it (logger): the first such line in this boot's journal. (Read without
	# --after-cursor, which did not find it.)
	ct_run journalctl -t envoy-agent-package --no-pager -o cat | grep 'falling back to a restart' >/dev/null ||
		fail "the fallback is not in the journal"
	[ "$(prop MainPID)" != "$pid0" ] || fail "the unit was not restarted"
	[ "$(ct_run envoy-agent version)" = "envoy-agent $livever" ] || fail "B is not running"
	expect_body
}

upgrade_live_deb() { upgrade_live envoy-agent-live.deb "$livever"; }
upgrade_broken_deb() { upgrade_broken envoy-agent-broken.deb; }

# rpm_download: Debian's rpm for the container, fetched with apt in a throwaway copy of the rootfs
# (the booted container has no network).
rpm_download() {
	mkdir -p "$share/rpmdebs"
	timeout 300 systemd-nspawn -D "$ROOTFS" --register=no --keep-unit --volatile=overlay \
		--machine="envoy-agent-e2e-apt-$$" --bind="$share/rpmdebs:/mnt/debs" --pipe /bin/sh -ec '
		apt-get -qq update
		apt-get -qq install --download-only -y -o Dir::Cache::archives=/mnt/debs rpm' </dev/null >"$work/rpm-apt.log" 2>&1 ||
		{ tail -n 20 "$work/rpm-apt.log"; return 1; }
	echo "detail: $(ls "$share/rpmdebs" | grep -c '\.deb$') packages"
}

# rpm_systemd: the .rpm's scriptlets under the container's running systemd: install, start,
# live upgrade under load, a broken upgrade, erase.
rpm_systemd() {
	T=180 ct_sh 'dpkg -i /mnt/e2e/rpmdebs/*.deb >/dev/null && rpm --version' || return 1
	ct_run systemctl is-active -q "$UNIT" && fail "the .deb's unit is still active"
	T=180 ct_run rpm -i --nodeps /mnt/e2e/envoy-agent.rpm || return 1
	ct_run install -m 0644 /mnt/e2e/v1.yaml /etc/envoy-agent/envoy.yaml || return 1
	ct_sh 'chgrp envoy-agent /etc/envoy-agent/envoy.yaml && chmod 0640 /etc/envoy-agent/envoy.yaml' || return 1
	current v1
	T=120 ct_run systemctl start "$UNIT" || { ct_run journalctl -u "$UNIT" -n 30 --no-pager; return 1; }
	wait_for 60 unit_is active || fail "not active after start"
	echo "detail: $(ct_run rpm --version), $(ct_run systemctl --version | head -n1)"
	upgrade_live envoy-agent-live.rpm "$livever" || return 1
	upgrade_broken envoy-agent-broken.rpm || return 1
	T=120 ct_run rpm -e --nodeps envoy-agent || return 1
	unit_is inactive || fail "unit $(prop ActiveState) after erase"
	! ct_run pgrep -x envoy || fail "an Envoy is still running after erase"
}

# --- template instances in the package lifecycle (issue 19) --------------------------------------

# instance_b_enabled: envoy-agent@b enabled and started beside the plain unit (and @a enabled, not
# started: its link is one purge must remove too).
instance_b_enabled() {
	inst_files b b1 || return 1
	T=120 ct_run systemctl enable --now envoy-agent@b || { ct_run journalctl -u envoy-agent@b -n 30 --no-pager; return 1; }
	ct_run systemctl enable envoy-agent@a 2>/dev/null || return 1
	wait_for 60 sh -c "[ \"\$(nsenter --target $ct --mount --uts --ipc --net --pid --cgroup -- systemctl show -p ActiveState --value envoy-agent@b)\" = active ]" ||
		fail "envoy-agent@b is $(iprop b ActiveState)"
	[ "$(iget b)" = "200 b1" ] || fail "b answered \"$(iget b)\""
	echo "detail: @b MainPID $(iprop b MainPID), Envoy $(ienvoy_pid b); links: $(ct_sh 'ls /etc/systemd/system/multi-user.target.wants/ | grep envoy-agent | tr "\n" " "')"
}

# upgrade_live_instance: dpkg -i of a newer package (B2) with the plain unit and envoy-agent@b
# running, both under load: each is handed over live (same MainPID, same Envoy process, the new
# binary: /proc/PID/exe is /usr/bin/envoy-agent, not "(deleted)"), 0 failed requests, and dpkg's
# output names each handover.
upgrade_live_instance() {
	local bpid0 benvoy0 best0 exe
	ct_run systemctl is-active -q envoy-agent@b || fail "envoy-agent@b is not running"
	bpid0=$(iprop b MainPID)
	benvoy0=$(ienvoy_pid b) || fail "no Envoy of @b"
	best0=$(envoy_started "$benvoy0")
	iclient_start b || return 1
	(upgrade_live envoy-agent-live2.deb "$live2ver")
	local rc=$?
	iclient_stop b || rc=1
	istatus b || fail "status of b"
	exe=$(ct_run readlink "/proc/$bpid0/exe")
	echo "detail: @b: MainPID $bpid0 -> $(iprop b MainPID), Envoy $benvoy0 -> $(ienvoy_pid b), exe $exe, agent version $(jq -r .agent.version "$work/status-b.json")"
	grep 'handed over live\|cannot hand over\|live upgrade failed' "$work/live.dpkg" | sed 's/^/dpkg: /'
	[ $rc -eq 0 ] || fail "the plain unit's live upgrade or @b's traffic failed"
	[ "$(iprop b MainPID)" = "$bpid0" ] || fail "@b's MainPID changed: it was restarted"
	[ "$(ienvoy_pid b)" = "$benvoy0" ] && [ "$(envoy_started "$benvoy0")" = "$best0" ] || fail "@b's Envoy was not kept"
	[ "$exe" = /usr/bin/envoy-agent ] || fail "@b runs $exe, not the new /usr/bin/envoy-agent"
	jcheck b ".agent.version == \"$live2ver\" and .state == \"live\""
	grep -q 'envoy-agent@b.service handed over live' "$work/live.dpkg" || fail "dpkg's output does not say @b was handed over live"
	grep -q 'envoy-agent.service handed over live' "$work/live.dpkg" || fail "dpkg's output does not say the plain unit was handed over live"
}

# remove_with_instance: dpkg -r with the plain unit and envoy-agent@b running and a slow request
# in flight to @b: the request completes (@b drained), every unit stops, nothing is left running.
remove_with_instance() {
	ct_run systemctl is-active -q envoy-agent@b || fail "envoy-agent@b is not running"
	ct_run systemctl is-active -q "$UNIT" || { T=120 ct_run systemctl start "$UNIT" && wait_for 60 unit_is active; } || return 1
	local since slow out
	since=$(cursor)
	ct_run curl -sS --max-time 30 -w ' %{http_code}' -H 'x-envoy-fault-delay-request: 3000' \
		"http://127.0.0.1:$(inst b listener)/slow" >"$work/bslow.out" 2>&1 &
	slow=$!
	echo "$slow" >>"$work/bg.pids"
	wait_for 5 sh -c "nsenter --target $ct --mount --uts --ipc --net --pid --cgroup -- curl -s 'http://127.0.0.1:$(inst b admin)/stats?filter=http.e2e.downstream_rq_active' | grep ': [1-9]' >/dev/null" ||
		fail "the slow request to @b never became active"
	out=$(dpkg_ct -r envoy-agent)
	local rc=$?
	echo "$out" | sed 's/^/dpkg: /'
	wait_for 30 gone "$slow"
	ct_run journalctl -u envoy-agent@b.service --after-cursor "$since" --no-pager -o cat >"$work/bremove.journal"
	local procs
	procs=$(ct_run ps -eo user=,comm= | grep -E 'envoy' || true)
	echo "detail: slow request to @b: $(cat "$work/bslow.out"); @b $(iprop b ActiveState)/$(iprop b Result); $(grep -ci drain "$work/bremove.journal") drain line(s) in @b's journal"
	[ $rc -eq 0 ] || fail "dpkg -r failed"
	grep -q '^b1 200' "$work/bslow.out" || fail "the in-flight request to @b did not complete"
	[ -z "$procs" ] || { echo "$procs"; fail "processes left"; }
	[ "$(iprop b ActiveState)" != active ] || fail "@b is still active"
	grep -qi drain "$work/bremove.journal" || { tail -n 20 "$work/bremove.journal"; fail "no drain in @b's journal"; }
	unit_is inactive || fail "unit $(prop ActiveState)"
	! ct_run test -e /usr/bin/envoy-agent || fail "/usr/bin/envoy-agent is still there"
	ct_run test -f /etc/envoy-agent/config.toml || fail "remove deleted the configuration (only purge should)"
}

# no_dpkg_warning: none of this release's dpkg runs (install, upgrades, remove, purge) warned.
no_dpkg_warning() {
	local n
	n=$(grep -c "^\[$release dpkg" "$work/dpkg-all.log")
	echo "detail: $n lines of dpkg output"
	[ "$n" -gt 0 ] || fail "no dpkg output recorded"
	! grep "^\[$release dpkg" "$work/dpkg-all.log" | grep -i 'warning' || fail "dpkg warned"
}

remove() {
	dpkg_ct -r envoy-agent || return 1
	local procs
	procs=$(ct_run ps -eo user=,comm= | grep -E 'envoy' || true)
	echo "detail: ActiveState=$(prop ActiveState), LoadState=$(prop LoadState)"
	[ -z "$procs" ] || { echo "$procs"; fail "processes left"; }
	unit_is inactive || fail "unit $(prop ActiveState)"
	! ct_run test -e /usr/bin/envoy-agent || fail "/usr/bin/envoy-agent is still there"
	ct_run test -f /etc/envoy-agent/config.toml || fail "remove deleted the configuration (only purge should)"
}

purge() {
	dpkg_ct -P envoy-agent || return 1
	local left
	# The find covers the instances' enablement links (multi-user.target.wants/envoy-agent@*),
	# every /run/envoy-agent*, and the units' /tmp and /var/tmp/systemd-private-* directories.
	left=$(ct_sh 'find / -xdev \( -path /proc -o -path /sys -o -path /mnt/e2e \) -prune -o -name "*envoy-agent*" -print
		find /run /dev/shm /tmp /var/tmp -name "*envoy-agent*" -o -name "envoy_shared_memory*" 2>/dev/null
		getent passwd envoy-agent; getent group envoy-agent
		ps -eo comm= | grep -x -e envoy -e envoy-agent
		test -e /etc/envoy-agent && echo /etc/envoy-agent
		dpkg-query -W -f "\${db:Status-Status}\n" envoy-agent 2>/dev/null | grep -vx not-installed')
	echo "detail: $(prop LoadState)"
	[ -z "$left" ] || { echo "$left"; fail "left behind after purge"; }
}

rpm_inspect() {
	[ -n "$rpm" ] || fail "no .rpm in $DIST"
	local files cfg scripts
	files=$(rpm -qpl "$rpm") || return 1
	echo "$files"
	for f in /usr/bin/envoy-agent /usr/lib/systemd/system/envoy-agent.service /etc/envoy-agent/config.toml \
		/etc/envoy-agent/envoy.yaml /usr/share/doc/envoy-agent/README.md; do
		grep -qx "$f" <<<"$files" || fail "$f missing from the rpm"
	done
	cfg=$(rpm -qp --qf '[%{FILEFLAGS:fflags} %{FILEMODES:perms} %{FILEUSERNAME}:%{FILEGROUPNAME} %{FILENAMES}\n]' "$rpm")
	echo "$cfg"
	grep -qE '^cn .* /etc/envoy-agent/config.toml$' <<<"$cfg" || fail "config.toml is not %config(noreplace)"
	grep -qE '^cn .* /etc/envoy-agent/envoy.yaml$' <<<"$cfg" || fail "envoy.yaml is not %config(noreplace)"
	scripts=$(rpm -qp --scripts "$rpm")
	echo "$scripts"
	for s in preinstall postinstall preuninstall postuninstall; do
		grep -q "^$s scriptlet" <<<"$scripts" || fail "no $s scriptlet"
	done
	echo "detail: $(echo "$files" | wc -l) files, config(noreplace): $(echo "$cfg" | awk '$1=="cn"{print $NF}' | tr '\n' ' ')"
}

# Install, upgrade and erase the .rpm with Debian's rpm into a scratch root: an overlay of the
# bookworm rootfs, so the scriptlets (run chrooted by rpm) find sh, useradd and systemctl.
rpm_scratch_root() {
	[ -n "$rpm" ] || fail "no .rpm in $DIST"
	local up r=$work/rpmroot
	up=$(ls "$work"/upgrade/envoy-agent-*.rpm | head -n1)
	mkdir -p "$r/upper" "$r/work" "$r/root"
	mount -t overlay overlay -o "lowerdir=$ROOTFS,upperdir=$r/upper,workdir=$r/work" "$r/root" || return 1
	local R=$r/root
	timeout 60 rpm --root "$R" --initdb || return 1
	timeout 120 rpm --root "$R" -i --nodeps "$rpm" || return 1
	grep -q '^envoy-agent:' "$R/etc/passwd" || fail "%pre did not create the user"
	test -x "$R/usr/bin/envoy-agent" && test -f "$R/usr/lib/systemd/system/envoy-agent.service" || fail "files missing"
	local preset=disabled
	test -L "$R/etc/systemd/system/multi-user.target.wants/envoy-agent.service" && preset=enabled
	stat -c '%a %U:%G %n' "$R/etc/envoy-agent" "$R/etc/envoy-agent/config.toml"
	echo "# edited" >>"$R/etc/envoy-agent/config.toml"
	timeout 120 rpm --root "$R" -U --nodeps "$up" || return 1
	grep -q '^# edited' "$R/etc/envoy-agent/config.toml" || fail "the upgrade lost the edited config.toml"
	local rpmnew=no
	test -e "$R/etc/envoy-agent/config.toml.rpmnew" && rpmnew=yes
	timeout 120 rpm --root "$R" -e envoy-agent || return 1
	test ! -e "$R/usr/bin/envoy-agent" || fail "erase left the binary"
	test ! -e "$R/etc/systemd/system/multi-user.target.wants/envoy-agent.service" || fail "erase left the unit enabled"
	local rpmsave=no
	test -e "$R/etc/envoy-agent/config.toml.rpmsave" && rpmsave=yes
	echo "detail: install: user created, preset left the unit $preset; upgrade kept the edit (rpmnew: $rpmnew); erase: disabled, files gone, config.toml.rpmsave: $rpmsave"
	umount "$R"
}

# The Envoy package's steps.
# shellcheck source=test/e2e/envoy_package.sh
. "$repo/test/e2e/envoy_package.sh"
# --- several instances: envoy-agent@.service and envoy-agent status --------------------------------

# Two instances of the template beside the plain unit, each with its own ports and base_id:
# NAME listener admin status base_id.
INSTANCES="a 8081 15001 15021 1
b 8082 15002 15022 2"

inst() { # inst NAME FIELD: one field (listener, admin, status, base) of an instance
	echo "$INSTANCES" | awk -v n="$1" -v f="$2" '$1 == n { print $(f == "listener" ? 2 : f == "admin" ? 3 : f == "status" ? 4 : 5) }'
}

iprop() { # iprop NAME PROPERTY: one property of envoy-agent@NAME
	ct_run systemctl show -p "$2" --value "envoy-agent@$1.service"
}

# inst_files NAME BODY [BASE_ID]: /etc/envoy-agent/NAME.toml and NAME.yaml (answering BODY).
inst_files() {
	local n=$1 body=$2 base=${3:-$(inst "$1" base)}
	bootstrap "$body" | sed -e "s/port_value: 80 }/port_value: $(inst "$n" listener) }/" \
		-e "s|pipe: { path: /run/envoy-agent/admin.sock, mode: 0600 }|socket_address: { address: 127.0.0.1, port_value: $(inst "$n" admin) }|" >"$share/inst-$n.yaml" || return 1
	cat >"$share/inst-$n.toml" <<-TOML
		[envoy]
		binary_path = "/usr/bin/envoy"
		config_path = "$n.yaml"
		admin_port = $(inst "$n" admin)
		base_id = $base
		drain_duration = "3s"
		parent_shutdown_duration = "6s"
		[agent]
		status_port = $(inst "$n" status)
		prometheus_port = 0
		termination_drain_duration = "20s"
		min_drain_duration = "1s"
		exit_on_zero_active_connections = true
	TOML
	ct_sh "install -m 0640 -g envoy-agent /mnt/e2e/inst-$n.toml /etc/envoy-agent/$n.toml &&
		install -m 0640 -g envoy-agent /mnt/e2e/inst-$n.yaml /etc/envoy-agent/$n.yaml"
}

iget() { # iget NAME: one request to instance NAME's listener; prints "CODE BODY"
	ct_run curl -sS --max-time 10 -w ' %{http_code}' "http://127.0.0.1:$(inst "$1" listener)/" | awk '{print $NF, $1}'
}

# istatus NAME: `envoy-agent status --json` for instance NAME, saved as $work/status-NAME.json;
# returns the command's exit code.
istatus() {
	ct_run envoy-agent status --config "/etc/envoy-agent/$1.toml" --json >"$work/status-$1.json"
}

# jcheck NAME JQ-EXPR: the last saved status of NAME satisfies the jq expression.
jcheck() {
	jq -e "$2" "$work/status-$1.json" >/dev/null || { cat "$work/status-$1.json"; fail "status of $1: want $2"; }
}

# iclient_start NAME: a client sending requests back to back to instance NAME, until iclient_stop.
iclient_start() {
	T=300 ct_sh "rm -f /run/e2e-iclient-$1-stop; while [ ! -e /run/e2e-iclient-$1-stop ]; do
		curl -s --max-time 5 -w ' %{http_code}\n' http://127.0.0.1:$(inst "$1" listener)/ | awk '{print \$NF, \$1}'
		sleep 0.02; done" >"$work/iclient-$1" 2>&1 &
	echo "$!" >"$work/iclient-$1.pid"
	echo "$!" >>"$work/bg.pids"
	wait_for 10 test -s "$work/iclient-$1"
}

# iclient_stop NAME: stops the client; fails if any request failed.
iclient_stop() {
	wait_for 30 has_lines "$work/iclient-$1" 10 # as client_stop
	ct_sh "touch /run/e2e-iclient-$1-stop"
	wait_for 15 gone "$(cat "$work/iclient-$1.pid")" || kill "$(cat "$work/iclient-$1.pid")" 2>/dev/null
	local total bad
	total=$(wc -l <"$work/iclient-$1")
	bad=$(grep -cvE '^200 [ab][12]$' "$work/iclient-$1")
	echo "detail: $1: $total requests, $bad failed ($(sort "$work/iclient-$1" | uniq -c | awk '{printf "%s%s x%s", sep, $2" "$3, $1; sep=", "}'))"
	[ "$total" -ge 10 ] || fail "$1: too few requests"
	[ "$bad" -eq 0 ] || { grep -vE '^200 [ab][12]$' "$work/iclient-$1" | sort | uniq -c; fail "$1: failed requests"; }
}

ienvoy_pid() { # ienvoy_pid NAME: the newest Envoy that instance NAME's agent runs
	ct_run pgrep -n -P "$(iprop "$1" MainPID)" -f -- "$SERVING_ENVOY"
}

instances_start() {
	ct_run test -f /usr/lib/systemd/system/envoy-agent@.service || fail "the package has no envoy-agent@.service"
	local out
	out=$(ct_run systemd-analyze verify envoy-agent@a.service 2>&1)
	[ -z "$out" ] || { echo "$out"; fail "systemd-analyze verify envoy-agent@a.service is not clean"; }
	inst_files a a1 && inst_files b b1 || return 1
	T=120 ct_run systemctl start envoy-agent@a envoy-agent@b || { ct_run journalctl -u 'envoy-agent@*' -n 30 --no-pager; return 1; }
	[ "$(iget a)" = "200 a1" ] && [ "$(iget b)" = "200 b1" ] || fail "a answered \"$(iget a)\", b \"$(iget b)\""
	local n
	for n in a b; do
		istatus "$n" || fail "envoy-agent status for $n exited $?"
		jcheck "$n" ".schema_version == 1 and .state == \"live\" and .agent.instance == \"$n\"
			and .agent.pid == $(iprop "$n" MainPID) and .envoy.base_id == $(inst "$n" base)
			and (.epochs | length) == 1 and .epochs[0].epoch == 0 and .epochs[0].role == \"serving\"
			and .epochs[0].pid == $(ienvoy_pid "$n") and .envoy.listeners[0].address == \"127.0.0.1:$(inst "$n" listener)\"
			and .last_reload == null"
		ct_run test -d "/run/envoy-agent-$n" || fail "no /run/envoy-agent-$n"
	done
	echo "detail: a: MainPID $(iprop a MainPID), Envoy $(ienvoy_pid a); b: MainPID $(iprop b MainPID), Envoy $(ienvoy_pid b); plain unit $(prop ActiveState)"
	echo "detail: $(ct_run envoy-agent status --config /etc/envoy-agent/a.toml | head -n1)"
}

instances_reload_one() {
	istatus b || fail "status of b"
	local b_before a_envoy0 b_main stable='[[.epochs[] | {epoch, pid, role, started}], .envoy.serving_epoch, .agent.pid, .reloads]'
	b_before=$(jq -c "$stable" "$work/status-b.json")
	b_main=$(iprop b MainPID)
	a_envoy0=$(ienvoy_pid a)
	iclient_start a && iclient_start b || return 1
	inst_files a a2 || return 1
	local start=$SECONDS rc
	T=120 ct_run systemctl reload envoy-agent@a
	rc=$?
	echo "detail: systemctl reload envoy-agent@a exit $rc in $((SECONDS - start))s"
	istatus a
	istatus b
	sleep 2 # traffic after the switch, on both
	iclient_stop a || return 1
	iclient_stop b || return 1
	[ $rc -eq 0 ] || fail "systemctl reload envoy-agent@a failed"
	grep -qx '200 a1' "$work/iclient-a" && grep -qx '200 a2' "$work/iclient-a" || fail "a's client did not see a1 -> a2"
	[ "$(iget a)" = "200 a2" ] || fail "a answers $(iget a)"
	# The default reload_method: a route change is made in place, in a's Envoy of epoch 0.
	jcheck a ".state == \"live\" and .envoy.serving_epoch == 0 and .epochs[0].epoch == 0 and .epochs[0].role == \"serving\"
		and .epochs[0].pid == $(ienvoy_pid a) and .epochs[0].pid == $a_envoy0 and (.epochs | length) == 1
		and .last_reload.ok == true and .last_reload.epoch == 0 and .last_reload.path == \"in_place\"
		and .last_reload.changed == \"routes updated e2e_http/0/0\" and .reloads.ok == 1"
	[ "$(jq -c "$stable" "$work/status-b.json")" = "$b_before" ] ||
		{ echo "before: $b_before"; cat "$work/status-b.json"; fail "b's epochs, pid or reloads changed"; }
	jcheck b '.last_reload == null and .envoy.serving_epoch == 0'
	[ "$(iprop b MainPID)" = "$b_main" ] || fail "b's MainPID changed"
	echo "detail: a: in place, epoch 0 pid $a_envoy0 -> $(jq .epochs[0].pid "$work/status-a.json") in $(jq .last_reload.took_ms "$work/status-a.json") ms ($(jq -r .last_reload.changed "$work/status-a.json")); b: epoch 0 pid $(jq .epochs[0].pid "$work/status-b.json") untouched"
}

instances_clash() {
	# c: b's base_id, ports of its own.
	INSTANCES="$INSTANCES
c 8083 15003 15023 2"
	inst_files c c1 || return 1
	local since rc
	since=$(cursor)
	T=60 ct_run systemctl start envoy-agent@c
	rc=$?
	ct_run journalctl -u envoy-agent@c.service --after-cursor "$since" --no-pager -o cat >"$work/clash.journal"
	local msg
	msg=$(grep -m1 'envoy.base_id' "$work/clash.journal")
	echo "detail: start exit $rc, ExecMainStatus $(iprop c ExecMainStatus), journal: $msg"
	[ $rc -ne 0 ] || fail "envoy-agent@c started with b's base_id"
	grep -q "/etc/envoy-agent/c.toml:5: envoy.base_id: base_id 2 is already used by envoy-agent@b (pid $(iprop b MainPID), /etc/envoy-agent/b.toml)" <<<"$msg" ||
		{ cat "$work/clash.journal"; fail "the error does not name envoy-agent@b and envoy.base_id"; }
	[ "$(iprop c ExecMainStatus)" = 3 ] || fail "exit status $(iprop c ExecMainStatus), want 3"
	[ "$(iprop c NRestarts)" = 0 ] || fail "systemd restarted envoy-agent@c"
	ct_run systemctl reset-failed envoy-agent@c.service
	[ "$(iget b)" = "200 b1" ] || fail "b answers $(iget b)"
}

instances_stop_one() {
	local b_main b_envoy
	b_main=$(iprop b MainPID)
	b_envoy=$(ienvoy_pid b)
	iclient_start b || return 1
	ct_run curl -sS --max-time 30 -w ' %{http_code}' -H 'x-envoy-fault-delay-request: 3000' \
		"http://127.0.0.1:$(inst a listener)/slow" >"$work/islow.out" 2>&1 &
	local slow=$!
	echo "$slow" >>"$work/bg.pids"
	wait_for 5 sh -c "nsenter --target $ct --mount --uts --ipc --net --pid --cgroup -- curl -s 'http://127.0.0.1:$(inst a admin)/stats?filter=http.e2e.downstream_rq_active' | grep ': [1-9]' >/dev/null" ||
		fail "the slow request never became active"
	T=90 ct_run systemctl stop envoy-agent@a &
	local stop=$!
	# While it drains, status says so, with the request in flight counted by the drain's poll.
	wait_for 10 sh -c "nsenter --target $ct --mount --uts --ipc --net --pid --cgroup -- envoy-agent status --config /etc/envoy-agent/a.toml --json >'$work/status-a.json'
		jq -e '.state == \"draining\" and .drain.kind == \"stop\" and .drain.active_connections >= 1 and .drain.elapsed_seconds > 0
			and .drain.remaining_seconds > 0 and .drain.done == false and .epochs[0].role == \"draining\"' '$work/status-a.json'" ||
		{ cat "$work/status-a.json"; fail "status of a never said draining with the request in flight"; }
	local drain
	drain=$(jq -c '.drain' "$work/status-a.json")
	wait "$stop" || fail "systemctl stop envoy-agent@a failed"
	wait_for 30 gone "$slow"
	istatus a
	local rc=$?
	istatus b || fail "status of b"
	iclient_stop b || return 1
	echo "detail: a while stopping: drain $drain; slow request: $(cat "$work/islow.out"); a afterwards: exit $rc, $(jq -r .state "$work/status-a.json")"
	grep -q '^a2 200' "$work/islow.out" || fail "the in-flight request to a did not complete"
	[ "$(iprop a ActiveState)" = inactive ] && [ "$(iprop a Result)" = success ] || fail "a: $(iprop a ActiveState) $(iprop a Result)"
	[ $rc -eq 3 ] || fail "envoy-agent status of a stopped agent exited $rc, want 3"
	jcheck a '.state == "stopped" and (.error | length) > 0'
	jcheck b ".state == \"live\" and .epochs[0].pid == $b_envoy and .agent.pid == $b_main and .reloads.ok == 0"
	[ "$(iprop b MainPID)" = "$b_main" ] && [ "$(ienvoy_pid b)" = "$b_envoy" ] || fail "b was restarted"
	ct_run test ! -e /run/envoy-agent-a || fail "/run/envoy-agent-a is left"
	# The other instance goes too, so the steps after this one see only the plain unit.
	T=90 ct_run systemctl stop envoy-agent@b || fail "systemctl stop envoy-agent@b failed"
	! ct_run pgrep -u envoy-agent -f 'envoy-agent run --config /etc/envoy-agent/[ab].toml' || fail "an instance is still running"
}

unit_security_template() {
	local out score
	out=$(systemd-analyze security --offline=yes --no-pager systemd/envoy-agent@.service 2>&1) || { echo "$out"; return 1; }
	score=$(echo "$out" | sed -n 's/.*Overall exposure level for envoy-agent@.*: \([0-9.]* [A-Z]*\).*/\1/p')
	echo "detail: $score"
	case "${score%% *}" in
	0.* | 1.[0-5]) ;;
	*) echo "$out" | grep '✗'; fail "exposure \"$score\" is above 1.5" ;;
	esac
}

# --- man pages, journal priorities, log rotation ---------------------------------------------------

# man envoy-agent and man 5 envoy-agent.toml render the installed pages.
man_pages() {
	local page8 page5
	page8=$(ct_sh 'MANWIDTH=100 man -P cat envoy-agent 2>&1') || { echo "$page8"; fail "man envoy-agent failed"; }
	page5=$(ct_sh 'MANWIDTH=100 man -P cat 5 envoy-agent.toml 2>&1') || { echo "$page5"; fail "man 5 envoy-agent.toml failed"; }
	echo "detail: $(echo "$page8" | sed -n '1p' | tr -s ' '), $(echo "$page8" | wc -l) + $(echo "$page5" | wc -l) lines"
	for w in 'reopen-logs' 'EXIT STATUS' 'SIGUSR1'; do
		grep -- "$w" <<<"$page8" >/dev/null || { echo "$page8" | head -40; fail "envoy-agent(8) has no \"$w\""; }
	done
	for w in 'termination_drain_duration' 'binary_path'; do
		grep -- "$w" <<<"$page5" >/dev/null || { echo "$page5" | head -40; fail "envoy-agent.toml(5) has no \"$w\""; }
	done
}

# A failed reload's reason reaches journalctl -p warning (the agent's line and the reload
# command's), and so do Envoy's warnings, while the agent's info lines stay below it. (Every grep
# here reads its whole input: grep -q would end a pipe early, which pipefail counts as a failure.)
journal_priorities() {
	local since rc warn boot_warn boot_info
	# --since, not --after-cursor: systemd 252's journalctl skips the first entry after the cursor
	# that matches -u/-p when the cursor's own entry does not match.
	since=$(ct_run date +%s) || return 1
	sleep 1
	put_bootstrap bad || return 1
	T=120 ct_run systemctl reload "$UNIT"
	rc=$?
	put_bootstrap "$(current)"
	[ $rc -ne 0 ] || fail "systemctl reload succeeded with a bad bootstrap"
	# journald reads each process's stream on its own: wait for both lines to be in.
	warnings() { ct_run journalctl -u "$UNIT" -p warning --since "@$since" --no-pager -o cat; }
	both_in() {
		local w
		w=$(warnings)
		grep 'level=error msg="reload failed' <<<"$w" >/dev/null && grep '^envoy-agent: reload failed' <<<"$w" >/dev/null
	}
	wait_for 10 both_in
	warn=$(warnings)
	echo "$warn" | sed 's/^/-p warning: /'
	echo "detail: $(grep -m1 'level=error msg="reload failed' <<<"$warn" | cut -c1-110)..."
	grep 'level=error msg="reload failed' <<<"$warn" >/dev/null || fail "the agent's reload failure is not at warning or above"
	grep '^envoy-agent: reload failed' <<<"$warn" >/dev/null || fail "envoy-agent reload's error is not at warning or above"
	boot_warn=$(ct_run journalctl -u "$UNIT" -p warning -b --no-pager -o cat)
	boot_info=$(ct_run journalctl -u "$UNIT" -p info -b --no-pager -o cat)
	grep '\]\[warning\]\[' <<<"$boot_warn" >/dev/null || fail "none of Envoy's [warning] lines is at warning"
	! grep -e 'envoy is LIVE' -e '\]\[info\]\[' <<<"$boot_warn" || fail "info lines are at warning or above"
	grep 'envoy is LIVE' <<<"$boot_info" >/dev/null || fail "info lines are missing"
	expect_body
}

# bootstrap_access_log BODY: the e2e bootstrap with an access log in /var/log/envoy-agent, one
# line per request (its path).
bootstrap_access_log() {
	bootstrap "$1" | sed 's|^          stat_prefix: e2e$|&\
          access_log:\
          - name: envoy.access_loggers.file\
            typed_config:\
              "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog\
              path: /var/log/envoy-agent/access.log\
              log_format: { text_format_source: { inline_string: "%REQ(:PATH)%\\n" } }|'
}

access_lines() { # access_lines FILE: lines in /var/log/envoy-agent/FILE (0 when missing)
	ct_sh "cat /var/log/envoy-agent/$1 2>/dev/null | wc -l"
}

access_lines_above() { # access_lines_above N FILE...: the files hold more than N lines in all
	local n=$1 sum=0 f
	shift
	for f in "$@"; do
		sum=$((sum + $(access_lines "$f")))
	done
	[ "$sum" -gt "$n" ]
}

# README's LogsDirectory= drop-in and an access log there; logrotate -f under traffic: Envoy goes
# on in the new file, and every request is in the old file or the new one. The drop-in and the
# plain bootstrap are put back whatever happened (/var/log/envoy-agent stays for purge to remove).
logrotate_access_log() {
	local body rc
	body=$(current)
	(logrotate_under_load "$body")
	rc=$?
	ct_run rm -rf "/etc/systemd/system/$UNIT.d"
	put_bootstrap "$body" && ct_run systemctl daemon-reload && T=120 ct_run systemctl restart "$UNIT" && expect_body || rc=1
	return $rc
}

logrotate_under_load() {
	local body=$1
	bootstrap_access_log "$body" >"$share/access.yaml" || return 1
	grep -q 'access.log' "$share/access.yaml" || fail "no access log in the bootstrap"
	ct_sh "mkdir -p /etc/systemd/system/$UNIT.d && printf '[Service]\nLogsDirectory=envoy-agent\n' > /etc/systemd/system/$UNIT.d/logs.conf" || return 1
	put_bootstrap access || return 1
	ct_run systemctl daemon-reload || return 1
	T=120 ct_run systemctl restart "$UNIT" || { ct_run journalctl -u "$UNIT" -n 30 --no-pager; return 1; }
	wait_for 60 unit_is active || fail "unit not active"
	expect_body || return 1
	# expect_body's request is in the log too: count from what is there before the client starts.
	wait_for 5 access_lines_above 0 access.log || fail "no access log line for the first request"
	local before
	before=$(access_lines access.log)
	client_start logrotate || return 1
	wait_for 10 access_lines_above 5 access.log || fail "no access log lines"
	local out
	out=$(T=60 ct_run logrotate -f -v /etc/logrotate.d/envoy-agent 2>&1)
	local rc=$?
	echo "$out" | grep -e 'renaming /var/log/envoy-agent/access.log to' -e 'running postrotate' -e 'error' | sed 's/^/logrotate: /'
	[ $rc -eq 0 ] || { echo "$out"; client_stop logrotate; fail "logrotate -f failed"; }
	ct_run test -f /var/log/envoy-agent/access.log.1 || { client_stop logrotate; fail "no access.log.1"; }
	wait_for 15 access_lines_above 5 access.log || { client_stop logrotate; fail "Envoy did not write to the new access.log"; }
	client_stop logrotate || return 1
	local total old new
	total=$(wc -l <"$work/logrotate.client")
	# Envoy writes its buffer out every second (--file-flush-interval-msec 1000).
	wait_for 10 access_lines_above $((total + before - 1)) access.log.1 access.log
	old=$(($(access_lines access.log.1) - before))
	new=$(access_lines access.log)
	echo "detail: $total requests; access.log.1 $old lines (+$before before), access.log $new lines; $(ct_run journalctl -u "$UNIT" --no-pager -o cat | grep -c 'reopened its log files') reopen(s) logged"
	[ $((old + new)) -eq "$total" ] || fail "$total requests but $((old + new)) access log lines"
	ct_sh "stat -c '%U:%G %a %n' /var/log/envoy-agent /var/log/envoy-agent/*"
}

# --- main ----------------------------------------------------------------------------------------

# release_full: Debian 12 (bookworm), every step.
release_full() {
	step "chroot: dpkg -i/-P without a running systemd (image build) succeeds, starts nothing" offline_install
	step "chroot: the Envoy package with and without envoy-agent, upgraded (trigger), no systemd: starts nothing" envoy_offline
	if setup_step "boot: systemd is PID 1 in the $release container" boot; then
		if step "install: dpkg -i the .deb" install_deb; then
			step "unit is enabled and active after install" enabled_active
			step "unit: systemd-analyze verify is clean in the container" verify_in_container
			step "systemctl show has the agent's STATUS text" status_text
			step "traffic passes (edited config, bootstrap v1 on port 80)" edit_config
			step "reload: edited bootstrap switches v1 -> v2, zero failed requests" reload_good
			step "reload: a bad bootstrap fails systemctl reload, traffic continues" reload_bad
			step "reload: a bad bootstrap right after a good reload fails in under 2 s while the old epoch drains" reload_bad_after_good
			step "reload in place (the default): a route change reloaded in place under load, 0 failed, same Envoy pid; reload_method = \"hot_restart\" set by a reload starts a new epoch" reload_in_place
			step "reload in place: config.toml put back byte for byte, restart: Envoy runs from resource files again" reload_in_place_undo
			step "scale: $SCALE certificates named by file (SNI): READY, every name served, one renewed within 2 s, same Envoy, no reload" scale_certificates
			step "scale: $SCALE HTTP listeners: a route edit of the last reloaded in place under load, 0 failed, same Envoy" scale_routes
			step "scale: the e2e bootstrap back, restarted" scale_undo
			step "envoy package: dpkg -i $ENVOY_FROM -> $ENVOY_TO under load, trigger reloads, 0 failed, /server_info $ENVOY_TO" envoy_upgrade
			step "envoy package: dpkg -i $ENVOY_TO -> $ENVOY_FROM (downgrade) under load, 0 failed, /server_info $ENVOY_FROM" envoy_downgrade
			step "envoy replaced by hand: STATUS= and the log say so, systemctl reload switches" envoy_by_hand
			step "envoy package of another hot-restart version (stand-in): reload refused, 0 failed, STATUS= says restart" envoy_other_hot_restart_version
			step "envoy package removed while the agent serves: dpkg -r succeeds, Envoy keeps serving, STATUS= says gone" envoy_removed_while_serving
			step "template: envoy-agent@a and @b start beside the plain unit, traffic through both, status --json" instances_start
			step "template: reload @a under load (in place), zero failed requests, @b untouched (pid, epoch)" instances_reload_one
			step "template: @c with @b's base_id refused (exit 3), naming @b and envoy.base_id" instances_clash
			step "template: stop @a drains (status: draining, then stopped, exit 3) while @b serves" instances_stop_one
			step "man envoy-agent and man 5 envoy-agent.toml show the installed pages" man_pages
			step "journal: -p warning shows a failed reload's reason and Envoy's warnings, not info" journal_priorities
			step "logrotate -f: Envoy writes on in the new access log, no request lost" logrotate_access_log
			step "control socket: nobody cannot quit, drain or reload; the service group can reload" control_socket_operators
			step "hot-restart sockets 0600 in /run/envoy-agent, none abstract; Envoy's shared memory in the unit's own /dev/shm" local_doors
			step "stop: after a reload, exit_on_zero ends within a poll of the old epoch's last request" stop_after_reload
			step "stop: a slow request in flight completes, clean stop, drain in the journal" stop_draining
			step "envoy package upgraded while envoy-agent is stopped: starts nothing, fails nothing" envoy_upgrade_stopped
			step "kill -9 of Envoy: the unit restarts by itself" kill9
			step "SIGSTOP of Envoy: the watchdog restarts the unit, -p err has the cause in one line, no stack dump" sigstop
			step "upgrade: newer package keeps the edited config, agent handed over live" upgrade
			if [ -n "${livever:-}" ]; then
				step "live upgrade: dpkg -i of B under load, 0 failed, same MainPID and Envoy" upgrade_live_deb
				step "live upgrade: dpkg -i of a broken B leaves the agent and Envoy serving" upgrade_broken_deb
				[ -n "${fallback_ready:-}" ] &&
					step "live upgrade: from an agent that predates it, falls back to a drained restart" upgrade_fallback
			fi
			instance_lifecycle
			if [ -n "${livever:-}" ] && setup_step "setup: Debian's rpm for the container (apt)" rpm_download; then
				step "rpm under systemd: install, start, live upgrade, broken upgrade, erase" rpm_systemd
			fi
			step "envoy package without envoy-agent: downgrade and purge succeed" envoy_without_agent
		fi
		journal_on_failure
	else
		skip "install and systemctl steps" "the container did not boot"
	fi
	step "rpm: contents, scriptlets and %config(noreplace) flags" rpm_inspect
	step "rpm: install, upgrade, erase in a scratch root (Debian's rpm)" rpm_scratch_root
	step "rpm: the Envoy packages' files, provides, %posttrans (no file triggers)" rpm_envoy_inspect
	step "rpm: Envoy installed, upgraded, downgraded, erased in a scratch root" rpm_envoy_scratch_root
}

# release_short: Debian 11 (bullseye) and 13 (trixie): the operator's path (see the top).
release_short() {
	if setup_step "boot: systemd is PID 1 in the $release container" boot; then
		if step "install: dpkg -i both packages (envoy $ENVOY_FROM, envoy-agent)" install_deb; then
			step "unit is enabled and active after install" enabled_active
			step "traffic passes (edited config, bootstrap v1 on port 80)" edit_config
			step "reload: edited bootstrap switches v1 -> v2, zero failed requests" reload_good
			step "reload: a bad bootstrap fails systemctl reload, traffic continues" reload_bad
			step "stop: a slow request in flight completes, clean stop, drain in the journal" stop_draining
			instance_lifecycle
		fi
		journal_on_failure
	else
		skip "install and systemctl steps" "the container did not boot"
	fi
}

# instance_lifecycle: the template instance through upgrade, remove and purge (every release).
instance_lifecycle() {
	if [ -n "${live2ver:-}" ]; then
		step "template lifecycle: envoy-agent@b enabled and started (and @a enabled)" instance_b_enabled
		step "template lifecycle: dpkg -i (upgrade) under load with @b running hands the plain unit and @b over live, 0 failed, new binary" upgrade_live_instance
		step "template lifecycle: dpkg -i of another Envoy release with @b running: the trigger reloads @b (and the plain unit) into it, 0 failed" envoy_trigger_instances
		step "template lifecycle: dpkg -r with @b running drains @b (request in flight completes), nothing left running" remove_with_instance
	else
		step "remove: nothing left running" remove
	fi
	step "purge: nothing of ours left (files, user, group, /run/envoy-agent*, instance links, private tmp)" purge
	step "dpkg: no warning on install, upgrade, remove or purge" no_dpkg_warning
}

journal_on_failure() {
	if [ $failed -gt 0 ]; then
		echo "--- journal of envoy-agent (last 60 lines)"
		ct_run journalctl -u "$UNIT" -u 'envoy-agent@*' --no-pager -o short-monotonic 2>&1 | grep -v '\]\[info\]\[' | tail -n 60 | sed 's/^/    /'
	fi
}

[ "$(id -u)" = 0 ] || { echo "FAIL e2e needs root"; echo "0 passed, 1 failed"; exit 1; }

setup_step "host: systemd-container, debootstrap and rpm present" host_tools
step "unit: systemd-analyze security --offline=yes is OK or better" unit_security
step "template unit: systemd-analyze security --offline=yes is 1.5 or better (AF_NETLINK: sock_diag)" unit_security_template
timings=
if setup_step "setup: packages, Envoy and test bootstraps staged" prepare_share; then
	setup_step "setup: live-upgrade packages (B, a broken one, B2)" prepare_live_upgrade
	case " $RELEASES " in *" bookworm "*)
		setup_step "setup: a package from before live upgrades" prepare_fallback && fallback_ready=1 ;;
	esac
	for release in $RELEASES; do
		release_start=$SECONDS
		failed_before=$failed
		ROOTFS=$ROOTS/rootfs-$release
		if [ -n "${E2E_ROOTFS:-}" ] && [ "$(echo $RELEASES)" = "$release" ]; then ROOTFS=$E2E_ROOTFS; fi
		echo "=== $release ($ROOTFS)"
		if setup_step "setup: $release rootfs" ensure_rootfs; then
			case $release in
			bookworm) release_full ;;
			*) release_short ;;
			esac
		fi
		shutdown
		took=$((SECONDS - release_start))
		echo "=== $release: $((failed - failed_before)) failed, ${took}s"
		timings="$timings $release ${took}s$([ $failed -gt $failed_before ] && echo ' (FAIL)'),"
	done
	echo "wall time per release:${timings%,}"
fi

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
