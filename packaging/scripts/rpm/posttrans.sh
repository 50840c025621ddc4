#!/bin/sh
# RPM %posttrans: after an upgrade (the mark %post left), hand every active agent over to the new
# binary live: the plain unit and every active instance of the template (envoy-agent@NAME), each
# saying which way it went; a stopped unit stays stopped (as try-restart would leave it). Never
# fails, and does nothing where systemd is not running (a chroot, an image build).
UNIT=envoy-agent.service

# active_units: the plain unit and every instance of the template that is active (or reloading).
active_units() {
	systemctl list-units --no-legend --plain --state=active,reloading "$UNIT" 'envoy-agent@*.service' 2>/dev/null |
		awk '{print $1}'
}

# unit_config UNIT: the configuration file the unit runs the agent with: the --config argument of
# the unit's own ExecStart= (root's unit file and drop-ins, as systemd loaded them), else the file
# the packaged units name (/etc/envoy-agent/NAME.toml for envoy-agent@NAME). Never the running
# process's /proc/PID/cmdline: that process is the service's user, and what it says of itself is
# what it chooses to say.
unit_config() {
	cfg=$(systemctl show -p ExecStart --value "$1" 2>/dev/null | sed -n -E 's/.*argv\[\]=([^;]*);.*/\1/p' | head -n 1 |
		tr ' ' '\n' | sed -n -E -e 's/^--?config=//p' -e '/^--?config$/{n;p;}' | head -n 1)
	inst=
	case $1 in
	envoy-agent@*.service)
		inst=${1#envoy-agent@}
		inst=${inst%.service}
		;;
	esac
	case $cfg in
	/*) ;;
	*) cfg= ;;
	esac
	if [ -z "$cfg" ]; then
		if [ -n "$inst" ]; then
			cfg=/etc/envoy-agent/$inst.toml
		else
			cfg=/etc/envoy-agent/config.toml
		fi
	fi
	# A specifier systemd left unexpanded.
	[ -z "$inst" ] || cfg=$(printf '%s\n' "$cfg" | sed "s|%i|$inst|g")
	echo "$cfg"
}

# KEPT is the binary that was installed before this upgrade, copied by the preinstall script
# (root's own copy, in a directory only root can write).
KEPT=/run/envoy-agent-package/envoy-agent

# live_upgrade UNIT: the package was upgraded while UNIT is active. Hand Envoy over to the new
# agent binary in place (`envoy-agent upgrade`: the agent re-executes itself, same PID, Envoy
# kept, no request dropped). Only when the running agent cannot hand over (it predates live
# upgrades, exit 4) restart the unit, which drains Envoy. When the new binary does not run, ask
# with the binary installed before the upgrade (KEPT), which the running agent then refuses and
# says so in its status; nothing is restarted, so the old agent keeps serving. Root runs only
# binaries that root installed: never /proc/MAINPID/exe, which the service's user controls (it
# may exec whatever it likes under that pid).
live_upgrade() {
	unit=$1
	pid=$(systemctl show -p MainPID --value "$unit" 2>/dev/null || true)
	cfg=$(unit_config "$unit")
	bin=/usr/bin/envoy-agent
	if ! "$bin" version >/dev/null 2>&1; then
		if [ -x "$KEPT" ] && "$KEPT" version >/dev/null 2>&1; then
			bin=$KEPT
		else
			say "envoy-agent: $unit: the new /usr/bin/envoy-agent does not run; the running agent keeps serving Envoy and was not restarted. Fix the binary, or run 'systemctl restart $unit' to switch with a drain"
			return 0
		fi
	fi
	rc=0
	"$bin" upgrade --config "$cfg" || rc=$?
	case $rc in
	0)
		say "envoy-agent: $unit handed over live to the new binary (main PID $pid and its Envoy kept, no drain)"
		;;
	4)
		say "envoy-agent: $unit: the running agent cannot hand over; falling back to a restart (Envoy drains)"
		systemctl restart "$unit" || say "envoy-agent: $unit: the restart failed; see 'systemctl status $unit'"
		;;
	*)
		say "envoy-agent: $unit: live upgrade failed (exit $rc); the running agent keeps serving Envoy and was not restarted. See 'systemctl status $unit' and 'journalctl -u $unit'; fix the binary, or run 'systemctl restart $unit' to switch with a drain"
		;;
	esac
}

say() {
	echo "$1" >&2
	if command -v logger >/dev/null 2>&1; then
		logger -t envoy-agent-package -- "$1" || true
	fi
}

mark=/var/lib/rpm-state/envoy-agent/upgrade
if [ -e "$mark" ]; then
	rm -f "$mark"
	if [ -d /run/systemd/system ]; then
		for unit in $(active_units); do
			live_upgrade "$unit"
		done
	fi
fi
# The preinstall script's copy of the binary installed before, for live_upgrade only.
rm -rf /run/envoy-agent-package
exit 0
