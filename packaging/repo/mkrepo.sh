#!/usr/bin/env bash
# mkrepo.sh OUT PACKAGE...: adds the .deb and .rpm files to the package repository in OUT (a
# signed apt repository in OUT/apt, a signed yum repository in OUT/yum) and regenerates and
# signs its indexes (`make repo`; docs/packaging.md, "The package repository").
#
# Publishing is additive: the packages already in OUT stay (apt and yum pick the newest version;
# an older one stays installable by version), so publishing a newer package is running this
# again with that package only. Every index is regenerated from what is in OUT each time.
#
#   OUT/apt/pool/main/*.deb                     the .deb files, every architecture
#   OUT/apt/dists/SUITE/main/binary-ARCH/Packages(.gz)   one index per architecture (REPO_ARCHES)
#   OUT/apt/dists/SUITE/{Release,InRelease,Release.gpg}  Release signed inline and detached
#   OUT/yum/Packages/*.rpm                      the .rpm files, signed (rpmsign), every architecture
#   OUT/yum/repodata/repomd.xml(.asc)           createrepo_c's metadata, repomd.xml signed
#   OUT/envoy-agent-archive-keyring.gpg, .asc   the public key (binary for apt's Signed-By, armored
#                                               for yum's gpgkey= and rpm --import)
#   OUT/envoy-agent.sources, OUT/envoy-agent.repo  what a host puts in /etc/apt/sources.list.d/ and
#                                               /etc/yum.repos.d/ (with REPO_URL)
#
# Environment:
#   GNUPGHOME     the keyring with the signing key (required)
#   REPO_KEY      the signing key (an ID, fingerprint or user ID in GNUPGHOME). Empty: a test key,
#                 "envoy-agent test repository", made in GNUPGHOME when it has none (only with
#                 REPO_TEST_KEY=1: a real keyring never gets a test key by accident)
#   REPO_URL      where the repository is served, for the two host files (https://repo.example.org/envoy-agent)
#   REPO_SUITE    the apt suite (stable); REPO_ARCHES the apt architectures (amd64 arm64)
# The tools: apt-ftparchive (apt-utils), createrepo_c (createrepo-c), rpmsign (rpm), gpg;
# `make repo` installs the missing ones.
set -euo pipefail

[ $# -ge 1 ] || { echo "usage: $0 OUT [PACKAGE...]" >&2; exit 2; }
out=$1
shift
: "${GNUPGHOME:?GNUPGHOME: the keyring with the signing key}"
export GNUPGHOME
REPO_KEY=${REPO_KEY:-}
REPO_URL=${REPO_URL:-https://repo.example.org/envoy-agent}
REPO_SUITE=${REPO_SUITE:-stable}
REPO_ARCHES=${REPO_ARCHES:-amd64 arm64}
TEST_UID="envoy-agent test repository <envoy-agent-test-repository@example.invalid>"

for tool in apt-ftparchive createrepo_c rpmsign gpg; do
	command -v "$tool" >/dev/null || { echo "$0: $tool is missing (make repo installs it)" >&2; exit 1; }
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The signing key.
mkdir -p -m 0700 "$GNUPGHOME"
test_key_warning="warning: signing with the TEST key in $GNUPGHOME: it has no passphrase and lies in the build's cache; never publish a repository signed with it (set REPO_KEY to your own key)"
if [ -z "$REPO_KEY" ]; then
	[ "${REPO_TEST_KEY:-0}" = 1 ] || { echo "$0: REPO_KEY is empty (set REPO_TEST_KEY=1 for a test key)" >&2; exit 1; }
	if ! gpg --batch --list-secret-keys "$TEST_UID" >/dev/null 2>&1; then
		# No passphrase: a key for tests, kept in the build's cache, never one to publish with.
		gpg --batch --quiet --passphrase '' --quick-generate-key "$TEST_UID" rsa3072 sign never
		echo "made a test signing key in $GNUPGHOME"
	fi
	REPO_KEY=$TEST_UID
	# Every run that signs with it says so (first and last), not only the one that made it.
	test_key=1
	echo "$test_key_warning" >&2
fi
fpr=$(gpg --batch --with-colons --list-secret-keys "$REPO_KEY" | awk -F: '$1 == "fpr" {print $10; exit}')
[ -n "$fpr" ] || { echo "$0: no secret key \"$REPO_KEY\" in $GNUPGHOME" >&2; exit 1; }
sign=(gpg --batch --yes --quiet --local-user "$fpr" --digest-algo SHA512)

# The packages, into the pools.
mkdir -p "$out/apt/pool/main" "$out/yum/Packages"
for p in "$@"; do
	case $p in
	*.deb)
		# Under its canonical name, PACKAGE_VERSION_ARCH.deb: apt-ftparchive --arch reads only
		# files named *_ARCH.deb and *_all.deb.
		name=$(dpkg-deb -f "$p" Package)_$(dpkg-deb -f "$p" Version | sed 's/^[0-9]*://')_$(dpkg-deb -f "$p" Architecture).deb
		cp -f "$p" "$out/apt/pool/main/$name"
		;;
	*.rpm)
		cp -f "$p" "$out/yum/Packages/"
		# An .rpm carries its own signature (what gpgcheck=1 checks).
		# Debian's rpm names gpg2 as its gpg (%__gpg): give it gpg.
		rpmsign --define "_gpg_name $fpr" --define "_gpg_path $GNUPGHOME" --define "__gpg $(command -v gpg)" \
			--define "_gpg_digest_algo sha512" \
			--addsign "$out/yum/Packages/$(basename "$p")" >"$tmp/rpmsign" 2>&1 || { cat "$tmp/rpmsign" >&2; exit 1; }
		;;
	*) echo "$0: $p is neither a .deb nor an .rpm" >&2; exit 1 ;;
	esac
done

# The public key: binary for apt's Signed-By, armored for yum and rpm.
gpg --batch --yes --export "$fpr" >"$out/envoy-agent-archive-keyring.gpg"
gpg --batch --yes --armor --export "$fpr" >"$out/envoy-agent-archive-keyring.asc"

# apt: one Packages index per architecture, then Release over them, signed.
(
	cd "$out/apt"
	dist=dists/$REPO_SUITE
	rm -rf "$dist"
	for a in $REPO_ARCHES; do
		mkdir -p "$dist/main/binary-$a"
		apt-ftparchive --arch "$a" packages pool/main >"$dist/main/binary-$a/Packages"
		gzip -9nkf "$dist/main/binary-$a/Packages"
	done
	apt-ftparchive \
		-o APT::FTPArchive::Release::Origin=envoy-agent \
		-o APT::FTPArchive::Release::Label=envoy-agent \
		-o APT::FTPArchive::Release::Suite="$REPO_SUITE" \
		-o APT::FTPArchive::Release::Codename="$REPO_SUITE" \
		-o APT::FTPArchive::Release::Architectures="$REPO_ARCHES" \
		-o APT::FTPArchive::Release::Components=main \
		-o APT::FTPArchive::Release::Description="envoy-agent and Envoy packages" \
		release "$dist" >"$dist/Release.tmp"
	mv "$dist/Release.tmp" "$dist/Release"
	"${sign[@]}" --clearsign -o "$dist/InRelease" "$dist/Release"
	"${sign[@]}" --armor --detach-sign -o "$dist/Release.gpg" "$dist/Release"
)

# yum: createrepo_c over every .rpm (both architectures: yum picks the host's), repomd.xml signed.
createrepo_c --quiet --update "$out/yum" >/dev/null
"${sign[@]}" --armor --detach-sign -o "$out/yum/repodata/repomd.xml.asc" "$out/yum/repodata/repomd.xml"

# What a host adds.
cat >"$out/envoy-agent.sources" <<EOF
Types: deb
URIs: $REPO_URL/apt
Suites: $REPO_SUITE
Components: main
Signed-By: /etc/apt/keyrings/envoy-agent-archive-keyring.gpg
EOF
cat >"$out/envoy-agent.repo" <<EOF
[envoy-agent]
name=envoy-agent and Envoy
baseurl=$REPO_URL/yum
enabled=1
gpgcheck=1
repo_gpgcheck=1
gpgkey=$REPO_URL/envoy-agent-archive-keyring.asc
EOF

# Check what was signed, with the exported key only (as a host would).
check=$tmp
gpgv --keyring "$out/envoy-agent-archive-keyring.gpg" "$out/apt/dists/$REPO_SUITE/InRelease" 2>"$check/gpgv" ||
	{ cat "$check/gpgv" >&2; exit 1; }
gpgv --keyring "$out/envoy-agent-archive-keyring.gpg" "$out/apt/dists/$REPO_SUITE/Release.gpg" "$out/apt/dists/$REPO_SUITE/Release" 2>"$check/gpgv" ||
	{ cat "$check/gpgv" >&2; exit 1; }
gpgv --keyring "$out/envoy-agent-archive-keyring.gpg" "$out/yum/repodata/repomd.xml.asc" "$out/yum/repodata/repomd.xml" 2>"$check/gpgv" ||
	{ cat "$check/gpgv" >&2; exit 1; }
rpmkeys --dbpath "$check/rpmdb" --import "$out/envoy-agent-archive-keyring.asc"
nrpm=0
for f in "$out"/yum/Packages/*.rpm; do
	[ -e "$f" ] || continue
	rpmkeys --dbpath "$check/rpmdb" --checksig "$f" | grep -q ': digests signatures OK$' ||
		{ rpmkeys --dbpath "$check/rpmdb" --checksig -v "$f" >&2; echo "$0: $f: signature not OK" >&2; exit 1; }
	nrpm=$((nrpm + 1))
done
ndeb=$(find "$out/apt/pool/main" -name '*.deb' | wc -l)
echo "repository $out: $ndeb .deb ($REPO_ARCHES), $nrpm .rpm, signed by $fpr; InRelease, Release.gpg, repomd.xml.asc and every .rpm verified with the exported key"
[ -z "${test_key:-}" ] || echo "$test_key_warning" >&2
