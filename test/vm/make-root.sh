#!/usr/bin/env bash
# Creates (once, then reuses) a Debian userland for the test VM and for
# chroot builds: test/vm/make-root.sh SUITE   (trixie = Debian 13,
# bookworm = Debian 12: test/run-all.sh builds the release the host is not).
# Prints the root's path on stdout. Run as root; needs debootstrap and
# Debian's mirror. The root lives in the VM cache (outside /tmp, which the
# guest covers with tmpfs) and is rebuilt when the package list changes.
set -euo pipefail
suite=${1:?usage: make-root.sh SUITE}
case "$suite" in
trixie | bookworm) ;;
*) echo "make-root.sh: only trixie (Debian 13) and bookworm (Debian 12) are supported" >&2; exit 2 ;;
esac
[ "$(id -u)" = 0 ] || { echo "make-root.sh: run as root" >&2; exit 1; }

# What evd needs to build, test and run in that userland, and what the VM's
# guest stage uses (bash, ip, rdma, modprobe, rping, timeout, ps).
pkgs=(g++ make autoconf automake libtool pkg-config file
      libfabric-dev libfabric-bin libibverbs-dev librdmacm-dev libgtest-dev
      rdma-core ibverbs-utils rdmacm-utils iproute2 kmod procps python3
      openmpi-bin libopenmpi-dev)
mirror=${EVD_DEBIAN_MIRROR:-http://deb.debian.org/debian}

cache=${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/evd-vm
root=$cache/$suite-root
stamp=$root/.evd-root-stamp
want=$(printf '%s\n' "$suite" "${pkgs[@]}" | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "$root"
    exit 0
fi

if ! command -v debootstrap >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >&2
fi
mkdir -p "$cache"
tmp=$root.tmp
rm -rf "$tmp"
include=$(IFS=,; echo "${pkgs[*]}")
echo "make-root.sh: debootstrap $suite into $root (a few minutes)" >&2
debootstrap --variant=minbase --include="$include" "$suite" "$tmp" "$mirror" >"$cache/$suite-debootstrap.log" 2>&1 ||
    { echo "make-root.sh: debootstrap failed, see $cache/$suite-debootstrap.log" >&2; tail -5 "$cache/$suite-debootstrap.log" >&2; exit 1; }
# The guest binds its own /etc/hosts over this one.
[ -e "$tmp/etc/hosts" ] || echo "127.0.0.1 localhost" >"$tmp/etc/hosts"
rm -rf "$root"
mv "$tmp" "$root"
echo "$want" >"$stamp"
echo "$root"
