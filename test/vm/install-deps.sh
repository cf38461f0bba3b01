#!/bin/sh
# Installs what test/vm/run-in-vm needs on Debian 12 (run as root).
# Idempotent: does nothing when everything is there, and runs
# `apt-get update` only when something has to be installed.
set -eu

PKGS="qemu-system-x86 busybox-static kmod cpio linux-image-amd64 iproute2
rdma-core ibverbs-utils rdmacm-utils libfabric-bin procps coreutils
debootstrap util-linux git"

if [ "$(id -u)" != 0 ]; then
    echo "install-deps.sh: run as root" >&2
    exit 1
fi

missing=
for p in $PKGS; do
    s=$(dpkg-query -W -f '${db:Status-Status}' "$p" 2>/dev/null || true)
    [ "$s" = installed ] || missing="$missing $p"
done

if [ -z "$missing" ]; then
    echo "install-deps.sh: all present"
else
    echo "install-deps.sh: installing$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# The guest loads modules for the kernel it boots from /lib/modules: make sure
# at least one /boot/vmlinuz-*-amd64 has them.
for k in /boot/vmlinuz-*-amd64; do
    [ -d "/lib/modules/${k#/boot/vmlinuz-}" ] && exit 0
done
echo "install-deps.sh: no /boot/vmlinuz-*-amd64 with matching /lib/modules" >&2
exit 1
