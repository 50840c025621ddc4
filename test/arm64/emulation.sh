#!/usr/bin/env bash
# Makes this amd64 machine run arm64 (aarch64) Linux programs: Debian's
# qemu-user-static through binfmt_misc, and libc6-arm64-cross for the loader
# and glibc of dynamically linked ones (Envoy, whose copy `make test-arm64`
# points at them with patchelf, also installed here). Installs and registers only what is
# missing (as root: apt-get, mount, the binfmt_misc register file); says what
# it did. Run by `make test-arm64`.
set -euo pipefail

binfmt=/proc/sys/fs/binfmt_misc
conf=/usr/lib/binfmt.d/qemu-aarch64.conf
loader=/usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1

need_root() {
	if [ "$(id -u)" != 0 ]; then
		echo "arm64 emulation: $1; run as root (or do it once: $2)" >&2
		exit 1
	fi
}

if [ ! -e "$conf" ] || [ ! -e "$loader" ] || ! command -v patchelf >/dev/null; then
	need_root "qemu-user-static, libc6-arm64-cross or patchelf is missing" "apt-get install qemu-user-static libc6-arm64-cross patchelf"
	echo "arm64 emulation: installing qemu-user-static, libc6-arm64-cross and patchelf"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user-static libc6-arm64-cross patchelf >/dev/null
fi

if [ ! -e "$binfmt/register" ]; then
	need_root "binfmt_misc is not mounted" "mount -t binfmt_misc binfmt_misc $binfmt"
	echo "arm64 emulation: mounting binfmt_misc on $binfmt"
	mount -t binfmt_misc binfmt_misc "$binfmt"
fi

# The name is the conf line's first field (":qemu-aarch64:M::...").
name=$(cut -d: -f2 "$conf")
if [ ! -e "$binfmt/$name" ]; then
	need_root "$name is not registered with binfmt_misc" "cat $conf > $binfmt/register"
	echo "arm64 emulation: registering $conf"
	cat "$conf" >"$binfmt/register"
fi
if [ "$(head -n1 "$binfmt/$name")" != enabled ]; then
	need_root "$name is registered but disabled" "echo 1 > $binfmt/$name"
	echo 1 >"$binfmt/$name"
fi
echo "arm64 emulation: $(sed -n 's/^interpreter //p' "$binfmt/$name") runs aarch64 programs (binfmt_misc $name, flags $(sed -n 's/^flags: //p' "$binfmt/$name")); loader $loader"
