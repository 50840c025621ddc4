#!/bin/sh
# RPM %preun: the shell equivalent of %systemd_preun. On erase ($1 = 0), disable the unit and
# stop it (the stop only when systemd is running). Upgrades ($1 >= 1) leave it alone.
UNIT=envoy-agent.service

if [ "$1" -eq 0 ] 2>/dev/null; then
	if [ -d /run/systemd/system ]; then
		systemctl --no-reload disable --now "$UNIT" >/dev/null 2>&1 || :
	else
		systemctl --no-reload disable "$UNIT" >/dev/null 2>&1 || :
	fi
fi
exit 0
