#!/usr/bin/env bash
# Fetches the Debian packages the lab's real Talos is assembled from (make talos,
# imager talos), unpacked and never installed:
#
#   DEST/kernel/root     the newest trixie-backports kernel (linux-binary + linux-modules of
#                        the package linux-image-amd64 names there, >= 6.15 as Talos >= 1.12
#                        needs), with depmod run on it
#   DEST/userland/root   what Talos' rootfs runs from Debian: udev, runc, kmod, xfsprogs,
#                        dosfstools, and everything they depend on (trixie)
#   DEST/installer/root  what Talos' installer runs from Debian: grub (BIOS), xfsprogs,
#                        dosfstools, systemd-boot (trixie), with their dependencies
#   DEST/versions.txt    "package version" of every package unpacked: the key of what is
#                        built from them
#
# apt runs with a private sources list, package lists, status and archive cache under
# DEST/apt, so the host's apt configuration never learns of trixie. The dependency closure
# is apt's own (install --download-only against an empty dpkg status); the imager copies
# from the unpacked trees only the binaries it needs and the libraries their ELF headers
# name. Idempotent: lists are fetched only when missing or when a download fails (the
# mirror dropped a version: backports keep only the current one), .debs only when not in
# the archive cache, and a tree is unpacked again only when its set of .debs changed.
#
#   hack/talos-debian.sh DEST
set -euo pipefail

dest="${1:?usage: talos-debian.sh DEST}"
mkdir -p "$dest"
dest="$(cd "$dest" && pwd)"

if [ "$(id -u)" -ne 0 ]; then
	echo "talos-debian: apt-get needs root" >&2
	exit 1
fi

# The kernel must be new enough for Talos (open_tree on detached mounts: 6.15).
min_kernel="6.15"
rootfs_pkgs=(udev runc kmod xfsprogs dosfstools)
installer_pkgs=(grub-pc-bin grub-efi-amd64-bin grub2-common xfsprogs dosfstools systemd-boot-efi)

apt_dir="$dest/apt"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial" "$apt_dir/parts"
touch "$apt_dir/status"
cat >"$apt_dir/sources.list" <<EOF
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie-backports main
EOF

apt_opts=(
	-o "Dir::Etc::sourcelist=$apt_dir/sources.list"
	-o "Dir::Etc::sourceparts=$apt_dir/parts"
	-o "Dir::Etc::preferencesparts=$apt_dir/parts"
	-o "Dir::State::Lists=$apt_dir/lists"
	-o "Dir::State::status=$apt_dir/status"
	-o "Dir::Cache=$apt_dir"
	-o "Dir::Cache::archives=$apt_dir/archives"
	-o "APT::Get::List-Cleanup=0"
	-o "APT::Sandbox::User=root"
	-o "APT::Install-Recommends=0"
	-o "Debug::NoLocking=1"
)

updated=0
update() {
	[ "$updated" -eq 1 ] && return 0
	echo "talos-debian: apt-get update (trixie, trixie-backports)"
	apt-get "${apt_opts[@]}" update -qq
	updated=1
}

ls "$apt_dir/lists/"*trixie-backports*Packages* >/dev/null 2>&1 || update

# Nothing to do when this script and the package lists are what the trees were unpacked
# from: resolving three closures costs apt a minute and more on a loaded host.
inputs="$(sha256sum "$0" | cut -d' ' -f1)"
if [ -f "$dest/inputs" ] && [ "$(cat "$dest/inputs")" = "$inputs" ] && [ -f "$dest/versions.txt" ] &&
	[ -z "$(find "$apt_dir/lists" -maxdepth 1 -type f -newer "$dest/versions.txt" -print -quit)" ]; then
	echo "talos-debian: $dest is up to date ($(head -n1 "$dest/versions.txt"))"
	exit 0
fi

# The kernel: what linux-image-amd64 depends on in trixie-backports.
resolve_kernel() {
	local meta
	meta="$(apt-cache "${apt_opts[@]}" madison linux-image-amd64 | awk -F'|' '$3 ~ /trixie-backports/ { gsub(/ /, "", $2); print $2; exit }')"
	[ -n "$meta" ] || return 1
	apt-cache "${apt_opts[@]}" depends "linux-image-amd64=$meta" |
		awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }'
}

kpkg="$(resolve_kernel || true)"
if [ -z "$kpkg" ]; then
	update
	kpkg="$(resolve_kernel)"
fi
kver="${kpkg#linux-image-}"
case "$(printf '%s\n%s\n' "$min_kernel" "${kver%%+*}" | sort -V | head -n1)" in
"$min_kernel") ;;
*)
	echo "talos-debian: trixie-backports offers kernel $kver, Talos needs >= $min_kernel" >&2
	exit 1
	;;
esac

# download PKG... : into the archive cache; prints the .deb paths of the closure. A failed
# download (the lists name a version the mirror dropped) updates the lists once and retries.
closure() {
	local out
	if ! out="$(apt-get "${apt_opts[@]}" install --download-only -y -qq --print-uris "$@" 2>&1)"; then
		echo "$out" >&2
		return 1
	fi
	if ! apt-get "${apt_opts[@]}" install --download-only -y -qq "$@" >/dev/null 2>&1; then
		update
		apt-get "${apt_opts[@]}" install --download-only -y -qq "$@" >/dev/null
	fi
	# Every package of the closure, cached or just fetched: the .debs apt would install.
	apt-get "${apt_opts[@]}" install -s -y "$@" | awk '$1 == "Inst" { print $2, substr($3, 2) }' |
		while read -r name version; do
			local file
			file="$(ls "$apt_dir/archives/${name}_${version//:/%3a}_"*.deb 2>/dev/null | head -n1)"
			if [ -z "$file" ]; then
				echo "talos-debian: $name $version is not in $apt_dir/archives" >&2
				return 1
			fi
			echo "$file"
		done
}

# unpack NAME DEB... : DEST/NAME/root from the .debs, unless its stamp names exactly them.
unpack() {
	local name="$1"
	shift
	local tree="$dest/$name" want
	want="$(printf '%s\n' "$@" | xargs -n1 basename | sort)"
	if [ -f "$tree/.stamp" ] && [ "$(cat "$tree/.stamp")" = "$want" ]; then
		return 0
	fi
	echo "talos-debian: unpacking $# packages into $tree/root"
	rm -rf "$tree"
	mkdir -p "$tree/root"
	for deb in "$@"; do
		dpkg-deb -x "$deb" "$tree/root"
	done
	echo "$want" >"$tree/.stamp"
}

mapfile -t kernel_debs < <(closure "linux-binary-$kver" "linux-modules-$kver" "linux-base-$kver" | grep -E "/linux-(binary|modules|base)-")
mapfile -t rootfs_debs < <(closure "${rootfs_pkgs[@]}")
mapfile -t installer_debs < <(closure "${installer_pkgs[@]}")

unpack kernel "${kernel_debs[@]}"
if [ ! -f "$dest/kernel/root/usr/lib/modules/$kver/modules.dep.bin" ] || [ "$dest/kernel/.stamp" -nt "$dest/kernel/root/usr/lib/modules/$kver/modules.dep.bin" ]; then
	echo "talos-debian: depmod $kver"
	depmod -b "$dest/kernel/root/usr" "$kver"
fi
unpack userland "${rootfs_debs[@]}"
unpack installer "${installer_debs[@]}"

{
	echo "kernel $kver"
	printf '%s\n' "${kernel_debs[@]}" "${rootfs_debs[@]}" "${installer_debs[@]}" | xargs -n1 basename | sort -u |
		sed -E 's/^([^_]+)_([^_]+)_.*/\1 \2/; s/%3a/:/'
} >"$dest/versions.txt.tmp"
mv "$dest/versions.txt.tmp" "$dest/versions.txt"
echo "$inputs" >"$dest/inputs"
echo "talos-debian: $dest ready (kernel $kver, $(wc -l <"$dest/versions.txt") lines in versions.txt)"
