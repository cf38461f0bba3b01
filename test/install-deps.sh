#!/usr/bin/env bash
# Installs (as root, on Debian 12) every package evd needs to build, test and
# run its Soft-RoCE VM. Idempotent: asks apt only for what is missing.
set -eu
here=$(cd "$(dirname "$0")" && pwd)

pkgs=(build-essential g++ make autoconf automake libtool pkg-config
      libfabric-dev libfabric-bin libibverbs-dev librdmacm-dev ibverbs-utils
      rdmacm-utils rdma-core libgtest-dev python3 git openmpi-bin libopenmpi-dev
      clang libclang-rt-dev   # clang: the libFuzzer targets (test/fuzz)
      valgrind strace)        # the count gate (test/gate/op-count.sh)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "install-deps: missing packages: ${missing[*]} (run as root)" >&2
        exit 1
    fi
    echo "install-deps: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The VM test bed's own packages (qemu, kernel, busybox, ...).
if [ -x "$here/vm/install-deps.sh" ]; then
    bash "$here/vm/install-deps.sh"
fi
