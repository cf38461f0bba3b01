#!/usr/bin/env bash
# The count gate (test/gate/op-count.sh): evd's instructions, allocations
# and system calls per data-path operation against the committed baseline
# of this userland's libfabric.
set -u
# the removal suites before this re-create the devices: wait (bounded) until
# both ports are active again
for _ in $(seq 100); do
    [ "$(rdma link show 2>/dev/null | grep -c 'state ACTIVE')" -ge 2 ] && break
    sleep 0.2
done
bash "$TOP/test/gate/op-count.sh" "$BUILD"
