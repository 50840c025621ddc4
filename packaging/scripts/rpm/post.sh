#!/bin/sh
# RPM %post: the shell equivalent of %systemd_post. On first install ($1 = 1) apply the preset
# (on Fedora/RHEL that usually leaves the unit disabled; the admin enables it). Never fails when
# systemd is not running.
UNIT=envoy-agent.service

if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || :
fi
if [ "$1" -eq 1 ] 2>/dev/null; then
	systemctl --no-reload preset "$UNIT" >/dev/null 2>&1 || :
fi
exit 0
