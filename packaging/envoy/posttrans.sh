#!/bin/sh
# RPM %posttrans of the envoy package: after a transaction that installed, upgraded or downgraded
# Envoy, tell a running envoy-agent to hot-restart into the new /usr/bin/envoy. This stands in for
# a %filetriggerin on /usr/bin/envoy in envoy-agent's rpm, which nfpm cannot write (see nfpm.yaml).
# It reloads the units that are active, the plain one and every instance of the template
# (envoy-agent@NAME): it never starts envoy-agent, and does nothing when systemd is not running
# (a chroot, an image build) or envoy-agent is not installed. It never fails the transaction: a
# refused reload (another hot-restart version, say) leaves that Envoy serving, and
# `systemctl status UNIT` says what to do.
if [ -d /run/systemd/system ]; then
	for unit in $(systemctl list-units --no-legend --plain --state=active,reloading \
		envoy-agent.service 'envoy-agent@*.service' 2>/dev/null | awk '{print $1}'); do
		echo "envoy: reloading $unit into the new /usr/bin/envoy"
		systemctl reload "$unit" ||
			echo "envoy: $unit kept the running Envoy; see: systemctl status $unit" >&2
	done
fi
exit 0
