# shellcheck shell=bash
# The e2e steps of the Envoy package (`make package-envoy`), sourced by test/e2e/run.sh, whose
# helpers (ct_run, client_start, fail, ...) they use: Envoy upgraded and downgraded through dpkg
# under load while the agent serves, a binary replaced by hand, the package installed with the
# agent stopped, absent or in a chroot, and the .rpm as far as Debian's rpm goes.

# prepare_envoy_packages: the two releases' packages into the share.
prepare_envoy_packages() {
	local v
	local arch rpmarch
	arch=$(dpkg --print-architecture) rpmarch=$(uname -m)
	for v in "$ENVOY_FROM" "$ENVOY_TO"; do
		[ -f "$DIST/envoy_$v-1_$arch.deb" ] && [ -f "$DIST/envoy-$v-1.$rpmarch.rpm" ] ||
			{ echo "no Envoy $v packages in $DIST (run make package-envoy ENVOY_VERSION=$v)"; return 1; }
	done
	cp "$DIST/envoy_$ENVOY_FROM-1_$arch.deb" "$share/envoy-from.deb" &&
		cp "$DIST/envoy_$ENVOY_TO-1_$arch.deb" "$share/envoy-to.deb" || return 1
	# The stand-in of another hot-restart version (a script: no Envoy release at hand has one).
	mkdir -p "$work/stand-in"
	timeout 300 go run ./packaging/cmd/mkpkg -config test/e2e/envoy-stand-in.yaml -formats deb -binary "$BINARY" \
		-version "$ENVOY_TO+e2e.stand.in" -out "$work/stand-in" >/dev/null || return 1
	cp "$work"/stand-in/envoy_*.deb "$share/envoy-stand-in.deb" || return 1
	envoy_rpm_from=$DIST/envoy-$ENVOY_FROM-1.$rpmarch.rpm
	envoy_rpm_to=$DIST/envoy-$ENVOY_TO-1.$rpmarch.rpm
}

server_version() { # the serving Envoy's release, from its /server_info
	ct_run curl -sS --max-time 5 --unix-socket /run/envoy-agent/admin.sock http://envoy/server_info |
		sed -n 's|.*"version": "[0-9a-f]*/\([^/]*\)/.*|\1|p'
}

one_envoy() { # only one Envoy process is left (the replaced epoch has exited)
	[ "$(ct_run pgrep -c -x envoy)" = 1 ]
}

pkg_states() { # "envoy ii, envoy-agent ii": dpkg's state of the packages
	ct_run dpkg-query -W -f '${Package} ${db:Status-Abbrev}\n' envoy envoy-agent 2>/dev/null |
		awk '{printf "%s%s %s", sep, $1, $2; sep=", "}'
}

# envoy_switch NAME DEB RELEASE: dpkg -i DEB under load; the trigger must hot-restart the agent's
# Envoy into it with no failed request. The load runs until the replaced epoch has exited.
envoy_switch() {
	local name=$1 deb=$2 want=$3 pid0 pid1 out rc v exe start=$SECONDS
	pid0=$(envoy_pid)
	client_start "$name" || return 1
	out=$(T=180 ct_run dpkg -i "/mnt/e2e/$deb" </dev/null 2>&1)
	rc=$?
	echo "$out"
	v=$(server_version)
	pid1=$(envoy_pid)
	exe=$(ct_run readlink "/proc/$pid1/exe")
	wait_for 30 one_envoy || echo "the replaced Envoy epoch did not exit within 30s"
	client_stop "$name"
	local crc=$?
	echo "detail: dpkg -i exit $rc in $((SECONDS - start))s, /server_info $v, Envoy pid $pid0 -> $pid1 running $exe; $(pkg_states)"
	echo "detail: StatusText=\"$(prop StatusText)\""
	[ $rc -eq 0 ] || fail "dpkg -i failed"
	grep -q 'reloading envoy-agent.service' <<<"$out" || fail "the trigger did not reload the agent"
	[ $crc -eq 0 ] || fail "requests failed"
	[ "$v" = "$want" ] || fail "/server_info says $v, want $want"
	[ "$pid1" != "$pid0" ] && [ "$exe" = /usr/bin/envoy ] || fail "the serving Envoy (pid $pid1) runs $exe"
	[ "$(pkg_states)" = "envoy ii, envoy-agent ii" ] || fail "package states: $(pkg_states)"
	unit_is active || fail "unit $(prop ActiveState)"
	! prop StatusText | grep 'installed Envoy' >/dev/null || fail "STATUS= still says the installed Envoy differs"
}

# envoy_trigger_instances: dpkg -i of the other Envoy release with envoy-agent@b running under
# load (and the plain unit, when it runs): the trigger reloads every active unit into it, @b with
# no failed request, and each then serves the new release.
envoy_trigger_instances() {
	local want deb out rc bv pv plain=
	ct_run systemctl is-active -q envoy-agent@b || fail "envoy-agent@b is not running"
	unit_is active && plain=yes
	if [ "$(iserver_version b)" = "$ENVOY_TO" ]; then want=$ENVOY_FROM deb=envoy-from.deb; else want=$ENVOY_TO deb=envoy-to.deb; fi
	iclient_start b || return 1
	out=$(T=180 ct_run dpkg -i "/mnt/e2e/$deb" </dev/null 2>&1)
	rc=$?
	iclient_stop b
	local crc=$?
	grep 'reloading\|refused' <<<"$out" | sed 's/^/dpkg: /'
	bv=$(iserver_version b)
	[ -n "$plain" ] && pv=$(status_version /etc/envoy-agent/config.toml)
	echo "detail: dpkg -i $deb exit $rc; @b /server_info $bv$([ -n "$plain" ] && echo ", plain unit $pv"); $(wc -l <"$work/iclient-b") requests to @b"
	[ $rc -eq 0 ] || fail "dpkg -i failed"
	grep -q 'reloading envoy-agent@b.service' <<<"$out" || fail "the trigger did not reload envoy-agent@b"
	[ $crc -eq 0 ] || fail "requests to @b failed"
	[ "$bv" = "$want" ] || fail "@b serves $bv, want $want"
	if [ -n "$plain" ]; then
		grep -q 'reloading envoy-agent.service' <<<"$out" || fail "the trigger did not reload the plain unit"
		[ "$pv" = "$want" ] || fail "the plain unit serves $pv, want $want"
	fi
}

# status_version CONFIG: the release the Envoy of the agent running CONFIG serves, from
# `envoy-agent status --json` (whatever admin address an earlier step gave that unit).
status_version() {
	ct_run envoy-agent status --config "$1" --json | jq -r '.envoy.version // empty' |
		sed -n 's|^[0-9a-f]*/\([^/]*\)/.*|\1|p'
}

iserver_version() { # iserver_version NAME: the release instance NAME's Envoy serves
	ct_run curl -sS --max-time 5 "http://127.0.0.1:$(inst "$1" admin)/server_info" |
		sed -n 's|.*"version": "[0-9a-f]*/\([^/]*\)/.*|\1|p'
}

envoy_upgrade() {
	envoy_switch envoy-upgrade envoy-to.deb "$ENVOY_TO"
}

envoy_downgrade() {
	envoy_switch envoy-downgrade envoy-from.deb "$ENVOY_FROM"
}

status_has() { # status_has TEXT: the unit's STATUS= has TEXT
	prop StatusText | grep -F "$1" >/dev/null
}

# A binary replaced without dpkg (no trigger): the agent notices by itself and says so; a
# `systemctl reload` switches to it. dpkg -i then puts the packaged release back (a reinstall of
# the same version fires the trigger too).
envoy_by_hand() {
	local since
	since=$(cursor)
	ct_sh "set -e; dpkg-deb --fsys-tarfile /mnt/e2e/envoy-to.deb | tar -xO ./usr/bin/envoy >/usr/bin/envoy.e2e-new
		chmod 0755 /usr/bin/envoy.e2e-new; mv /usr/bin/envoy.e2e-new /usr/bin/envoy" || return 1
	local start=$SECONDS
	wait_for 30 status_has "differs from the running one: a reload switches to it" ||
		fail "STATUS= did not tell of the replaced binary: \"$(prop StatusText)\""
	echo "detail: noticed after $((SECONDS - start))s: StatusText=\"$(prop StatusText)\""
	journal_after "$since" | grep -m1 'differs from the running one' | sed 's/^/journal: /'
	journal_after "$since" | grep 'differs from the running one' >/dev/null || fail "the log does not say it"
	T=120 ct_run systemctl reload "$UNIT" || fail "systemctl reload failed"
	local v
	v=$(server_version)
	echo "detail: after systemctl reload /server_info $v"
	[ "$v" = "$ENVOY_TO" ] || fail "/server_info says $v, want $ENVOY_TO"
	! status_has 'installed Envoy' || fail "STATUS= still says it: \"$(prop StatusText)\""
	local out
	out=$(T=180 ct_run dpkg -i /mnt/e2e/envoy-from.deb </dev/null 2>&1) || { echo "$out"; fail "dpkg -i failed"; }
	v=$(server_version)
	echo "detail: dpkg -i $ENVOY_FROM again: /server_info $v"
	[ "$v" = "$ENVOY_FROM" ] || fail "/server_info says $v after the reinstall, want $ENVOY_FROM"
}

# An Envoy package of another hot-restart version (a stand-in, see test/e2e/envoy-stand-in.sh),
# installed under load: the trigger's reload is refused, dpkg succeeds, the serving Envoy keeps
# serving, and STATUS= and the log say that a restart switches with a drain. Reinstalling the
# real package then reloads into it, and STATUS= is clean again.
envoy_other_hot_restart_version() {
	local since v0 v out rc start=$SECONDS
	since=$(cursor)
	ct_sh "set -e; mkdir -p /var/lib/e2e; dpkg-deb --fsys-tarfile /mnt/e2e/envoy-to.deb | tar -xO ./usr/bin/envoy >/var/lib/e2e/envoy
		chmod 0755 /var/lib/e2e/envoy" || return 1
	v0=$(server_version)
	client_start envoy-stand-in || return 1
	out=$(T=180 ct_run dpkg -i /mnt/e2e/envoy-stand-in.deb </dev/null 2>&1)
	rc=$?
	echo "$out"
	wait_for 15 status_has "cannot hot restart from it: a restart switches to it with a drain"
	local status
	status=$(prop StatusText)
	v=$(server_version)
	client_stop envoy-stand-in
	local crc=$?
	echo "detail: dpkg -i exit $rc in $((SECONDS - start))s; /server_info $v0 -> $v; $(pkg_states); StatusText=\"$status\""
	journal_after "$since" | grep -m1 'cannot hot restart from it' | sed 's/^/journal: /'
	[ $rc -eq 0 ] || fail "dpkg -i failed"
	grep -q 'the reload was refused' <<<"$out" || fail "the trigger's reload was not refused"
	[ $crc -eq 0 ] || fail "requests failed"
	[ "$v" = "$v0" ] || fail "the serving Envoy changed: $v0 -> $v"
	grep -q "the installed Envoy /usr/bin/envoy ($ENVOY_TO, hot-restart version 99.1) differs from the running one (hot-restart version 11.104) and cannot hot restart from it: a restart switches to it with a drain" <<<"$status" ||
		fail "STATUS= does not say the installed Envoy differs and a restart switches with a drain"
	journal_after "$since" | grep 'a restart switches to it with a drain' >/dev/null || fail "the log does not say it"
	[ "$(pkg_states)" = "envoy ii, envoy-agent ii" ] || fail "package states: $(pkg_states)"
	out=$(T=180 ct_run dpkg -i /mnt/e2e/envoy-from.deb </dev/null 2>&1) || { echo "$out"; fail "dpkg -i of the real package failed"; }
	v=$(server_version)
	echo "detail: the real $ENVOY_FROM package again: /server_info $v, StatusText=\"$(prop StatusText)\""
	[ "$v" = "$ENVOY_FROM" ] || fail "/server_info says $v"
	! status_has 'installed Envoy' || fail "STATUS= still says the installed Envoy differs"
	ct_run rm -rf /var/lib/e2e
}

# The Envoy package removed while the agent serves: the trigger's reload is refused (no binary),
# dpkg succeeds, the serving Envoy keeps serving and STATUS= says the installed Envoy is gone.
# Installing the package again reloads into it.
envoy_removed_while_serving() {
	local v0 v out rc status
	v0=$(server_version)
	client_start envoy-removed || return 1
	out=$(T=180 ct_run dpkg -r envoy </dev/null 2>&1)
	rc=$?
	echo "$out"
	wait_for 15 status_has "the installed Envoy /usr/bin/envoy is gone"
	status=$(prop StatusText)
	v=$(server_version)
	client_stop envoy-removed
	local crc=$?
	echo "detail: dpkg -r exit $rc; /server_info $v0 -> $v; StatusText=\"$status\""
	[ $rc -eq 0 ] || fail "dpkg -r failed"
	grep -q 'the reload was refused' <<<"$out" || fail "the trigger's reload was not refused"
	[ $crc -eq 0 ] || fail "requests failed"
	[ -n "$v" ] && [ "$v" = "$v0" ] || fail "the serving Envoy changed: $v0 -> $v"
	grep -q 'is gone (no such file or directory): the running one keeps serving' <<<"$status" ||
		fail "STATUS= does not say the installed Envoy is gone"
	out=$(T=180 ct_run dpkg -i /mnt/e2e/envoy-from.deb </dev/null 2>&1) || { echo "$out"; fail "dpkg -i failed"; }
	grep -q 'reloading envoy-agent.service' <<<"$out" || fail "the trigger did not reload the agent"
	echo "detail: installed again: /server_info $(server_version), StatusText=\"$(prop StatusText)\""
	! status_has 'installed Envoy' || fail "STATUS= still says the installed Envoy differs"
	unit_is active
}

# With the unit stopped (after the stop step), an upgrade of Envoy starts nothing and fails nothing.
envoy_upgrade_stopped() {
	unit_is inactive || fail "the unit is $(prop ActiveState), want inactive (the stop step ran before)"
	local out rc
	out=$(T=180 ct_run dpkg -i /mnt/e2e/envoy-to.deb </dev/null 2>&1)
	rc=$?
	echo "$out"
	echo "detail: dpkg -i exit $rc; unit $(prop ActiveState); $(pkg_states); $(ct_run envoy --version | grep -o 'version: [^ ]*')"
	[ $rc -eq 0 ] || fail "dpkg -i failed"
	grep -q 'Processing triggers for envoy-agent' <<<"$out" || fail "the trigger did not run"
	! grep -q 'reloading' <<<"$out" || fail "the trigger reloaded a stopped unit"
	unit_is inactive || fail "the unit is $(prop ActiveState)"
	! ct_run pgrep -x envoy || fail "an Envoy was started"
	[ "$(pkg_states)" = "envoy ii, envoy-agent ii" ] || fail "package states: $(pkg_states)"
	[ -z "$(ct_run dpkg --audit)" ] || fail "dpkg --audit: $(ct_run dpkg --audit)"
}

# With envoy-agent purged (after the purge step): a downgrade and a purge of Envoy succeed.
envoy_without_agent() {
	T=180 ct_run dpkg -i /mnt/e2e/envoy-from.deb </dev/null || fail "dpkg -i failed"
	local v
	v=$(ct_run dpkg-query -W -f '${Version}' envoy)
	T=180 ct_run dpkg -P envoy </dev/null || fail "dpkg -P envoy failed"
	echo "detail: downgraded to $v, purged"
	[ "$v" = "$ENVOY_FROM-1" ] || fail "version $v"
	! ct_run test -e /usr/bin/envoy || fail "/usr/bin/envoy is still there"
	! ct_run test -e /usr/share/doc/envoy || fail "/usr/share/doc/envoy is still there"
	! ct_run pgrep -x envoy || fail "an Envoy is running"
}

# In the rootfs with no systemd running (an image build): the Envoy package installed with and
# without the agent, upgraded with it (the trigger runs), then both purged; nothing starts.
envoy_offline() {
	timeout 180 systemd-nspawn -D "$ROOTFS" --register=no --keep-unit --volatile=overlay --private-network \
		--machine="envoy-agent-e2e-offline-envoy-$$" --bind-ro="$share:/mnt/e2e" --pipe /bin/sh -exc '
		test ! -d /run/systemd/system
		dpkg -i /mnt/e2e/envoy-from.deb
		dpkg -P envoy
		dpkg -i /mnt/e2e/envoy-agent.deb
		dpkg -i /mnt/e2e/envoy-from.deb
		dpkg -i /mnt/e2e/envoy-to.deb 2>&1 | tee /tmp/upgrade.out
		grep -q "Processing triggers for envoy-agent" /tmp/upgrade.out
		test "$(dpkg-query -W -f "\${db:Status-Abbrev}" envoy envoy-agent)" = "ii ii "
		test -z "$(dpkg --audit)"
		test -z "$(pgrep -x envoy)" && test -z "$(pgrep -x envoy-agent)"
		/usr/bin/envoy --version
		dpkg -P envoy envoy-agent
		test ! -e /usr/bin/envoy' </dev/null
}

rpm_envoy_inspect() {
	local f out
	for f in "$envoy_rpm_from" "$envoy_rpm_to"; do
		out=$(rpm -qp --qf '%{NAME} %{VERSION}-%{RELEASE} %{LICENSE}\n' "$f") || return 1
		echo "$out"
		rpm -qpl "$f" | tee "$work/envoy-rpm.files"
		grep -qx /usr/bin/envoy "$work/envoy-rpm.files" || fail "/usr/bin/envoy missing"
		grep -qx /usr/share/licenses/envoy/LICENSE "$work/envoy-rpm.files" || fail "the license is missing"
		rpm -qp --provides "$f" | tee "$work/envoy-rpm.provides"
		grep -qx 'envoy-hot-restart-11\.104' "$work/envoy-rpm.provides" || fail "no envoy-hot-restart-11.104 provide"
		# The glibc Envoy's binary needs, read from its symbol versions by mkpkg.
		rpm -qp --requires "$f" | grep -E '^glibc >= 2\.[0-9]+$' || fail "no glibc >= 2.x requirement"
	done
	rpm -qp --scripts --filetriggers "$envoy_rpm_to" | tee "$work/envoy-rpm.scripts"
	grep -q '^posttrans scriptlet' "$work/envoy-rpm.scripts" || fail "no %posttrans"
	grep -q 'systemctl reload "$unit"' "$work/envoy-rpm.scripts" || fail "%posttrans does not reload envoy-agent"
	grep -qF "'envoy-agent@*.service'" "$work/envoy-rpm.scripts" || fail "%posttrans does not reload the template's instances"
	rpm -qp --filetriggers "$envoy_rpm_to" >"$work/envoy-rpm.filetriggers"
	rpm -qp --filetriggers "$rpm" >>"$work/envoy-rpm.filetriggers"
	echo "detail: $(rpm -qp --qf '%{NAME}-%{VERSION}' "$envoy_rpm_from") and $(rpm -qp --qf '%{NAME}-%{VERSION}' "$envoy_rpm_to"), provides envoy-hot-restart-11.104, %posttrans reloads every active envoy-agent unit, instances too; file triggers: $(wc -l <"$work/envoy-rpm.filetriggers") (rpmpack writes none)"
}

# Install, upgrade, downgrade and erase the Envoy .rpm beside envoy-agent's in a scratch root (an
# overlay of the bookworm rootfs, no systemd): %posttrans runs and does nothing.
rpm_envoy_scratch_root() {
	[ -n "$rpm" ] || fail "no .rpm in $DIST"
	local r=$work/rpmroot-envoy
	mkdir -p "$r/upper" "$r/work" "$r/root"
	mount -t overlay overlay -o "lowerdir=$ROOTFS,upperdir=$r/upper,workdir=$r/work" "$r/root" || return 1
	# (The path expanded now: the trap runs after this function's locals are gone.)
	trap "umount '$r/root'" EXIT
	local R=$r/root
	timeout 60 rpm --root "$R" --initdb || return 1
	# --nodeps: the scratch root's rpm database is empty, so the packages' Requires (glibc >= 2.30
	# for Envoy, read from its binary; glibc for envoy-agent) name nothing it knows of. The
	# Requires themselves are checked by rpm_envoy_inspect.
	timeout 120 rpm --root "$R" -i --nodeps "$rpm" || return 1
	timeout 120 rpm --root "$R" -i --nodeps "$envoy_rpm_from" 2>&1 | tee "$work/envoy-rpm.out" || return 1
	local v1 v2 v3
	v1=$("$R/usr/bin/envoy" --version | grep -o 'version: [^ ]*')
	timeout 120 rpm --root "$R" -U --nodeps "$envoy_rpm_to" 2>&1 | tee -a "$work/envoy-rpm.out" || return 1
	v2=$("$R/usr/bin/envoy" --version | grep -o 'version: [^ ]*')
	timeout 120 rpm --root "$R" -U --nodeps --oldpackage "$envoy_rpm_from" 2>&1 | tee -a "$work/envoy-rpm.out" || return 1
	v3=$(rpm --root "$R" -q envoy)
	# Debian's rpm warns on every install (use Alien instead); anything else is the scriptlets'.
	local said
	said=$(grep -v -e 'should not be used directly' -e 'assuming you know what you are doing' "$work/envoy-rpm.out")
	echo "detail: installed $v1, upgraded to $v2, downgraded to $v3; scriptlet output: ${said:-none}"
	[ "$v3" = "envoy-$ENVOY_FROM-1.$(uname -m)" ] || fail "rpm -q envoy: $v3"
	grep -q "/$ENVOY_TO/" <<<"$v2" || fail "the upgrade did not install $ENVOY_TO"
	[ -z "$said" ] || fail "%posttrans said something without systemd"
	timeout 120 rpm --root "$R" -e envoy envoy-agent || return 1
	test ! -e "$R/usr/bin/envoy" || fail "erase left /usr/bin/envoy"
}
