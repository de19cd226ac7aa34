#!/usr/bin/env bash
# Repack Packer's lxc export (entries under ./rootfs/) as the tarball the lab unpacks into a node's root
# (entries under ./), keeping numeric owners and permissions. Plain tar: the lab unpacks it for every node, and
# skipping compression saves more time there than the disk it costs.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 PACKER_ROOTFS_TAR_GZ OUTPUT_TAR" >&2; exit 2; }
src=$1 out=$2
[ -f "$src" ] || { echo "lab-rootfs: $src does not exist" >&2; exit 1; }
work=$(mktemp -d "$(dirname "$out")/.repack.XXXXXX")
trap 'rm -rf "$work"' EXIT
tar --numeric-owner -xpzf "$src" -C "$work"
[ -d "$work/rootfs/etc" ] || { echo "lab-rootfs: $src has no rootfs/ tree" >&2; exit 1; }
tar --numeric-owner -C "$work/rootfs" -cf "$out.part" .
mv -f "$out.part" "$out"
echo "lab-rootfs: wrote $out ($(du -h "$out" | cut -f1))"
