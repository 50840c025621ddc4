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

# unit_config UNIT PID: the configuration file the unit's agent runs with (its --config argument),
# else the one the packaged units name.
unit_config() {
	cfg=$(tr '\0' '\n' 2>/dev/null <"/proc/$2/cmdline" | sed -n -E -e 's/^--?config=//p' -e '/^--?config$/{n;p;}' | head -n 1)
	if [ -z "$cfg" ]; then
		case $1 in
		envoy-agent@*.service)
			cfg=${1#envoy-agent@}
			cfg=/etc/envoy-agent/${cfg%.service}.toml
			;;
		*) cfg=/etc/envoy-agent/config.toml ;;
		esac
	fi
	echo "$cfg"
}

# live_upgrade UNIT: the package was upgraded while UNIT is active. Hand Envoy over to the new
# agent binary in place (`envoy-agent upgrade`: the agent re-executes itself, same PID, Envoy
# kept, no request dropped). Only when the running agent cannot hand over (it predates live
# upgrades, exit 4) restart the unit, which drains Envoy. When the new binary does not run, ask
# with the running agent's own binary (/proc/PID/exe), which then refuses and says so in its
# status; nothing is restarted, so the old agent keeps serving.
live_upgrade() {
	unit=$1
	pid=$(systemctl show -p MainPID --value "$unit" 2>/dev/null || true)
	cfg=$(unit_config "$unit" "$pid")
	bin=/usr/bin/envoy-agent
	if ! "$bin" version >/dev/null 2>&1; then
		if [ -n "$pid" ] && [ "$pid" != 0 ] && [ -x "/proc/$pid/exe" ]; then
			bin=/proc/$pid/exe
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
exit 0
