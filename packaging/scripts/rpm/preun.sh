#!/bin/sh
# RPM %preun: the shell equivalent of %systemd_preun, for the plain unit and every instance of the
# template (envoy-agent@NAME.service). On erase ($1 = 0), disable them and stop them (the stop
# only when systemd is running); each stop is a drain. Upgrades ($1 >= 1) leave them alone:
# %posttrans hands each running agent over to the new binary.
UNIT=envoy-agent.service

if [ "$1" -eq 0 ] 2>/dev/null; then
	# The loaded instances, and the enabled ones (their links) whether loaded or not.
	instances=$( {
		systemctl list-units --all --no-legend --plain 'envoy-agent@*.service' 2>/dev/null | awk '{print $1}'
		for l in /etc/systemd/system/*.wants/envoy-agent@*.service /etc/systemd/system/*.requires/envoy-agent@*.service; do
			[ -L "$l" ] && basename "$l"
		done
	} | sort -u)
	if [ -d /run/systemd/system ]; then
		[ -z "$instances" ] || echo "envoy-agent: stopping $UNIT and $(echo $instances) (each drains its Envoy)" >&2
		# shellcheck disable=SC2086 # one word per unit
		systemctl --no-reload disable --now "$UNIT" $instances >/dev/null 2>&1 ||
			echo "envoy-agent: stopping $UNIT $(echo $instances) failed; see 'systemctl status envoy-agent*'" >&2
	else
		# shellcheck disable=SC2086
		systemctl --no-reload disable "$UNIT" $instances >/dev/null 2>&1 || :
	fi
fi
exit 0
