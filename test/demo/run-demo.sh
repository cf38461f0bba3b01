#!/usr/bin/env bash
# The main job: installs what is missing, builds evd, boots the Soft-RoCE VM
# and runs evd_demo there: connect, traffic, a link flap and a device removal,
# each event printed as evd's EQ delivers it.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
bash test/install-deps.sh
[ -x configure ] || autoreconf -fi >/dev/null
mkdir -p build
cd build
[ -f Makefile ] || ../configure -q
make -j"$(nproc)" >/dev/null
cd "$top"
exec test/vm/run-in-vm -- env FI_PROVIDER_PATH="$top/build/.libs" FI_PROVIDER=evd "$top/build/evd_demo"
