#!/bin/sh
# RPM %postun: the shell equivalent of %systemd_postun_with_restart. After an upgrade ($1 >= 1),
# restart the unit if it is running, so the new binary takes over (one drain). Following Fedora
# practice, the envoy-agent user and group are kept on erase, and modified configuration is
# kept as .rpmsave by rpm itself.
UNIT=envoy-agent.service

if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || :
	if [ "$1" -ge 1 ] 2>/dev/null; then
		systemctl try-restart "$UNIT" >/dev/null 2>&1 || :
	fi
fi
exit 0
