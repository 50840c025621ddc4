#!/bin/sh
# RPM %posttrans: after an upgrade (the mark %post left), hand Envoy over to the new binary live
# when the unit is active; a stopped unit stays stopped (as try-restart would leave it). Never
# fails, and does nothing where systemd is not running (a chroot, an image build).
UNIT=envoy-agent.service

# live_upgrade: the package was upgraded while the unit is active. Hand Envoy over to the new
# agent binary in place (`envoy-agent upgrade`: the agent re-executes itself, same PID, Envoy
# kept, no request dropped). Only when the running agent cannot hand over (it predates live
# upgrades, exit 4) restart the unit, which drains Envoy. When the new binary does not run, ask
# with the running agent's own binary (/proc/PID/exe), which then refuses and says so in its
# status; nothing is restarted, so the old agent keeps serving.
live_upgrade() {
	bin=/usr/bin/envoy-agent
	if ! "$bin" version >/dev/null 2>&1; then
		pid=$(systemctl show -p MainPID --value "$UNIT" 2>/dev/null || true)
		if [ -n "$pid" ] && [ "$pid" != 0 ] && [ -x "/proc/$pid/exe" ]; then
			bin=/proc/$pid/exe
		fi
	fi
	rc=0
	"$bin" upgrade --config /etc/envoy-agent/config.toml || rc=$?
	case $rc in
	0) ;;
	4)
		say "envoy-agent: the running agent cannot hand over; falling back to a restart (Envoy drains)"
		systemctl restart "$UNIT" || true
		;;
	*)
		say "envoy-agent: live upgrade failed (exit $rc); the running agent keeps serving Envoy and was not restarted. See 'systemctl status $UNIT' and 'journalctl -u $UNIT'; fix the binary, or run 'systemctl restart $UNIT' to switch with a drain"
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
	if [ -d /run/systemd/system ] && systemctl --quiet is-active "$UNIT" 2>/dev/null; then
		live_upgrade
	fi
fi
exit 0
