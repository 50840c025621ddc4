#!/bin/sh
# RPM %postun: %systemd_postun without the restart: after an upgrade ($1 >= 1) the new package's
# %posttrans hands Envoy over to the new binary live (no drain). Following Fedora
# practice, the envoy-agent user and group are kept on erase, and modified configuration is
# kept as .rpmsave by rpm itself.
UNIT=envoy-agent.service

if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || :
	# An upgrade ($1 >= 1) restarts nothing here: the new package's %posttrans hands Envoy
	# over to the new binary live.
fi
exit 0
