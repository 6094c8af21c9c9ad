#!/usr/bin/env bash
# Unpacks Debian's non-free firmware packages into a firmware tree (default _out/firmware),
# laid out like /lib/firmware, for the imager to copy what the agent's modules ask for.
#
# The host is left as it is: apt runs with a private sources list, list and package cache
# under _out/apt, so neither /etc/apt nor /var/lib/apt/lists learn about non-free-firmware,
# and the packages are unpacked with dpkg-deb -x, never installed. Idempotent: a stamp
# naming the packages skips the work when the tree already holds them.
#
#   hack/firmware.sh [DEST]            ANVIL_FIRMWARE_PACKAGES overrides the package list
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
dest="${1:-$root/_out/firmware}"
packages="${ANVIL_FIRMWARE_PACKAGES:-firmware-bnx2 firmware-bnx2x firmware-misc-nonfree firmware-realtek firmware-qlogic}"
stamp="$dest/.anvil-firmware-packages"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$packages" ]; then
	exit 0
fi

. /etc/os-release
codename="${VERSION_CODENAME:?firmware.sh: no VERSION_CODENAME in /etc/os-release}"

apt_dir="$root/_out/apt"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial"
cat >"$apt_dir/sources.list" <<EOF
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $codename non-free-firmware
EOF

# Everything apt reads or writes for this run lives under _out/apt.
apt_opts=(
	-o "Dir::Etc::sourcelist=$apt_dir/sources.list"
	-o "Dir::Etc::sourceparts=-"
	-o "Dir::State::Lists=$apt_dir/lists"
	-o "Dir::Cache=$apt_dir"
	-o "Dir::Cache::archives=$apt_dir/archives"
	-o "APT::Get::List-Cleanup=0"
	-o "APT::Sandbox::User=root"
)

echo "firmware: fetching $packages ($codename non-free-firmware)"
apt-get "${apt_opts[@]}" update -qq
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get "${apt_opts[@]}" download -qq $packages)

unpacked="$work/root"
for deb in "$work"/*.deb; do
	dpkg-deb -x "$deb" "$unpacked"
done

# bookworm ships lib/firmware, later releases usr/lib/firmware (merged /usr).
src="$unpacked/lib/firmware"
[ -d "$unpacked/usr/lib/firmware" ] && src="$unpacked/usr/lib/firmware"
rm -rf "$dest.new"
mkdir -p "$(dirname "$dest")"
cp -a "$src" "$dest.new"
echo "$packages" >"$dest.new/.anvil-firmware-packages"
rm -rf "$dest"
mv "$dest.new" "$dest"
echo "firmware: $(find "$dest" -type f | wc -l) files, $(du -sh "$dest" | cut -f1) in $dest"
