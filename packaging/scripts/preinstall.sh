#!/bin/sh
# preinstall (deb preinst, rpm %pre): create the envoy-agent system group and user before the
# files, which are group-owned by envoy-agent, are unpacked. Idempotent; runs on install and
# upgrade alike, in a booted system or a chroot/image build.
set -e

if ! getent group envoy-agent >/dev/null 2>&1; then
	groupadd --system envoy-agent
fi
if ! getent passwd envoy-agent >/dev/null 2>&1; then
	useradd --system --gid envoy-agent --no-create-home --home-dir /nonexistent \
		--shell /usr/sbin/nologin --comment "envoy-agent (Envoy proxy)" envoy-agent
fi
exit 0
