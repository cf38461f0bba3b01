#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# Builds siw.ko (Soft-iWARP) for the VM's kernel. Debian's kernels leave it
# out (CONFIG_RDMA_SIW is not set in 6.1 or 6.12), but its source ships in
# Debian's linux-source-<major.minor> package: this script takes the driver's
# directory from that tarball and builds it as an out-of-tree module against
# the kernel's linux-headers package, then caches it like run-in-vm's
# initramfs. Prints the module's path on its last line.
#
#   test/vm/build-siw.sh [KERNEL_VERSION]     (default: run-in-vm's kernel)
#
# As root it installs linux-source-X.Y and linux-headers-KVER when missing.
set -u
set -o pipefail
PATH=${PATH:+$PATH:}/usr/sbin:/sbin
err() { echo "build-siw: $*" >&2; }

kver=${1:-}
if [ -z "$kver" ]; then
    while read -r k; do
        v=${k#/boot/vmlinuz-}
        if [ -r "$k" ] && [ -d "/lib/modules/$v" ]; then kver=$v; break; fi
    done < <(ls -1 /boot/vmlinuz-*-amd64 2>/dev/null | sort -rV)
fi
[ -n "$kver" ] || { err "no kernel found (/boot/vmlinuz-*-amd64)"; exit 1; }
series=$(sed -n 's/^\([0-9]*\.[0-9]*\).*/\1/p' <<<"$kver")
[ -n "$series" ] || { err "cannot read the kernel series from $kver"; exit 1; }
src_pkg=linux-source-$series
hdr_pkg=linux-headers-$kver

have() { dpkg-query -W -f '${db:Status-Status}' "$1" 2>/dev/null | grep -qx installed; }
missing=()
have "$src_pkg" || missing+=("$src_pkg")
have "$hdr_pkg" || missing+=("$hdr_pkg")
for t in make gcc xz tar; do command -v "$t" >/dev/null || missing+=("$t"); done
if [ ${#missing[@]} -gt 0 ]; then
    [ "$(id -u)" = 0 ] || { err "missing ${missing[*]}: run as root"; exit 1; }
    pkgs=()
    for p in "${missing[@]}"; do
        case $p in gcc) pkgs+=(gcc) ;; make) pkgs+=(make) ;; xz) pkgs+=(xz-utils) ;; tar) pkgs+=(tar) ;; *) pkgs+=("$p") ;; esac
    done
    err "installing ${pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null ||
        { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null; } ||
        { err "cannot install ${pkgs[*]}"; exit 1; }
fi
tarball=$(ls -1 /usr/src/linux-source-"$series".tar.* 2>/dev/null | head -n 1)
[ -r "$tarball" ] || { err "no /usr/src/linux-source-$series.tar.* from $src_pkg"; exit 1; }
[ -d "/lib/modules/$kver/build" ] || { err "no /lib/modules/$kver/build from $hdr_pkg"; exit 1; }

cache_dir=${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}/evd-vm
mkdir -p "$cache_dir" 2>/dev/null && [ -w "$cache_dir" ] || cache_dir=${TMPDIR:-/tmp}/evd-vm-cache-$(id -u)
mkdir -p "$cache_dir" || exit 1
key=$({
    echo "$kver"
    stat -c '%s %Y' "$tarball" "/lib/modules/$kver/build/Module.symvers"
    sha256sum <"$0"
} | sha256sum | cut -c1-16)
out=$cache_dir/siw-$kver-$key.ko
if [ -s "$out" ]; then
    echo "$out"
    exit 0
fi
# one build at a time (run-nodes starts every node's run-in-vm at once)
exec 9>"$cache_dir/siw-build.lock"
flock 9
if [ -s "$out" ]; then
    echo "$out"
    exit 0
fi

work=$(mktemp -d "$cache_dir/siw-build.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
top=$(tar -tf "$tarball" 2>/dev/null | head -n 1 | cut -d/ -f1)
err "extracting drivers/infiniband/sw/siw from $tarball"
tar -xf "$tarball" -C "$work" "$top/drivers/infiniband/sw/siw" ||
    { err "drivers/infiniband/sw/siw not in $tarball"; exit 1; }
mod=$work/$top/drivers/infiniband/sw/siw
err "building siw.ko against /lib/modules/$kver/build"
# The driver's own Makefile builds siw.o when CONFIG_RDMA_SIW is m.
make -s -C "/lib/modules/$kver/build" M="$mod" CONFIG_RDMA_SIW=m modules >"$work/build.log" 2>&1 ||
    { err "build failed:"; tail -n 30 "$work/build.log" >&2; exit 1; }
[ -s "$mod/siw.ko" ] || { err "no siw.ko after the build"; exit 1; }
modinfo -F vermagic "$mod/siw.ko" | grep -q "^$kver " ||
    { err "siw.ko's vermagic '$(modinfo -F vermagic "$mod/siw.ko")' is not $kver"; exit 1; }
cp "$mod/siw.ko" "$work/siw.ko.done" && mv -f "$work/siw.ko.done" "$out" || exit 1
find "$cache_dir" -maxdepth 1 -name "siw-$kver-*.ko" ! -name "${out##*/}" -delete 2>/dev/null
echo "$out"
