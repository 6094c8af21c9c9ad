#!/usr/bin/env bash
# Fetches what the agent's arm64 boot assets are built from, on an x86-64 Debian host:
# Debian's arm64 kernel (linux-image-<abi>-arm64) and systemd-boot's arm64 UKI stub
# (systemd-boot-efi), downloaded with apt-get download and unpacked with dpkg-deb -x into
# _out/arm64/root — never installed. The .deb ships no modules.dep/modules.alias (the
# postinst makes them), so depmod -b makes them in the unpacked tree; kmod's depmod reads
# foreign-architecture modules.
#
# Idempotent: the arm64 foreign architecture is added only if missing, apt-get update runs
# only when the arm64 package lists are missing or a download fails, packages are
# downloaded only when their .deb is not in _out/arm64/debs, and the tree is unpacked again
# only when the set of .debs changed (a stamp names them).
#
#   hack/arm64-assets.sh [DEST]        DEST defaults to _out/arm64
#
# Then: imager --arch arm64 --kernel-root DEST/root \
#         --uki-stub DEST/root/usr/lib/systemd/boot/efi/linuxaa64.efi.stub
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
dest="${1:-$root/_out/arm64}"
debs="$dest/debs"
tree="$dest/root"
stamp="$dest/.root.stamp"

as_root() {
	if [ "$(id -u)" -ne 0 ]; then
		echo "arm64-assets: $* needs root" >&2
		exit 1
	fi
	"$@"
}

if ! dpkg --print-foreign-architectures | grep -qx arm64; then
	echo "arm64-assets: adding the arm64 dpkg architecture"
	as_root dpkg --add-architecture arm64
fi

updated=0
update() {
	[ "$updated" -eq 1 ] && return 0
	echo "arm64-assets: apt-get update"
	as_root apt-get update -qq
	updated=1
}

# The package lists know arm64 packages once an update ran after --add-architecture.
if ! apt-cache show linux-image-arm64:arm64 >/dev/null 2>&1; then
	update
fi

# linux-image-arm64 is a metapackage; the kernel is the package it depends on, whose name
# changes with every ABI bump (linux-image-6.1.0-57-arm64).
kpkg="$(apt-cache depends linux-image-arm64:arm64 | awk '$1 == "Depends:" { sub(/:arm64$/, "", $2); print $2; exit }')"
if [ -z "$kpkg" ]; then
	echo "arm64-assets: cannot resolve the package behind linux-image-arm64:arm64" >&2
	exit 1
fi
kversion="${kpkg#linux-image-}"

mkdir -p "$debs"
files=()
for pkg in "$kpkg" systemd-boot-efi; do
	want="$(apt-cache policy "$pkg:arm64" | awk '$1 == "Candidate:" { print $2 }')"
	# apt-get download names files with the version's ':' escaped as %3a.
	file="${pkg}_${want//:/%3a}_arm64.deb"
	if [ -f "$debs/$file" ]; then
		files+=("$file")
		continue
	fi
	echo "arm64-assets: downloading $pkg:arm64 $want"
	# A stale package list names a version the mirror no longer has: update once, retry.
	if ! (cd "$debs" && apt-get download -qq "$pkg:arm64=$want" 2>/dev/null); then
		update
		want="$(apt-cache policy "$pkg:arm64" | awk '$1 == "Candidate:" { print $2 }')"
		file="${pkg}_${want//:/%3a}_arm64.deb"
		(cd "$debs" && apt-get download -qq "$pkg:arm64=$want")
	fi
	[ -f "$debs/$file" ] || { echo "arm64-assets: $file not downloaded" >&2; exit 1; }
	files+=("$file")
done

want_stamp="${files[*]}"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want_stamp" ] && [ -f "$tree/lib/modules/$kversion/modules.dep" ]; then
	echo "arm64-assets: $tree is up to date ($kversion)"
	exit 0
fi

echo "arm64-assets: unpacking ${files[*]} into $tree"
rm -rf "$tree" "$stamp"
mkdir -p "$tree"
for f in "${files[@]}"; do
	dpkg-deb -x "$debs/$f" "$tree"
done

echo "arm64-assets: depmod $kversion"
depmod -b "$tree" "$kversion"

echo "$want_stamp" >"$stamp"
echo "arm64-assets: $tree ready ($kversion)"
