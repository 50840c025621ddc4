#!/bin/sh
# RPM %post: the shell equivalent of %systemd_post. On first install ($1 = 1) apply the preset
# (on Fedora/RHEL that usually leaves the unit disabled; the admin enables it). Never fails when
# systemd is not running.
UNIT=envoy-agent.service

if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || :
fi
# An upgrade ($1 >= 2): leave a mark for %posttrans, which runs once the old package's files
# and scripts are gone, to hand Envoy over to the new binary.
if [ "$1" -ge 2 ] 2>/dev/null; then
	mkdir -p /var/lib/rpm-state/envoy-agent 2>/dev/null && : >/var/lib/rpm-state/envoy-agent/upgrade || :
fi
if [ "$1" -eq 1 ] 2>/dev/null; then
	systemctl --no-reload preset "$UNIT" >/dev/null 2>&1 || :
fi
exit 0
