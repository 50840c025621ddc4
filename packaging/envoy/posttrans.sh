#!/bin/sh
# RPM %posttrans of the envoy package: after a transaction that installed, upgraded or downgraded
# Envoy, tell a running envoy-agent to hot-restart into the new /usr/bin/envoy. This stands in for
# a %filetriggerin on /usr/bin/envoy in envoy-agent's rpm, which nfpm cannot write (see nfpm.yaml).
# It reloads only a unit that is active: it never starts envoy-agent, and does nothing when
# systemd is not running (a chroot, an image build) or envoy-agent is not installed. It never
# fails the transaction: a refused reload (another hot-restart version, say) leaves the running
# Envoy serving, and `systemctl status envoy-agent` says what to do.
UNIT=envoy-agent.service

if [ -d /run/systemd/system ] && systemctl --quiet is-active "$UNIT" 2>/dev/null; then
	systemctl reload "$UNIT" ||
		echo "envoy: envoy-agent kept the running Envoy; see: systemctl status envoy-agent" >&2
fi
exit 0
