#!/bin/bash
# Network of one node of the multi-node test bed (test/vm/run-nodes), run as
# root inside that node's VM by guest-run:
#
#   eth0 (virtio-net, MAC 52:54:00:ee:00:0<I>)  198.51.100.<I+1>/24
#   rxe0 on eth0, or with EVD_NODE_DRIVER=siw siw0 (Soft-iWARP, the module
#   run-in-vm built with build-siw.sh and put in the run directory)
#
# Each node is a VM with its own kernel; the nodes' NICs are joined by the
# host-side Ethernet switch of run-nodes. Nothing here routes by policy: the
# peer's address is simply on the same subnet.
#
# Environment (from guest-run): EVD_NODE (this node's index), EVD_NODE_ADDR
# (its address), EVD_NODE_DEV (rxe0), EVD_NODE_NETDEV (eth0).
# The last line printed on failure says what went wrong.

set -u
set -o pipefail

DRIVER=${EVD_NODE_DRIVER:-rxe}
DEV=${EVD_NODE_DEV:-${DRIVER}0} NETDEV=${EVD_NODE_NETDEV:-eth0}
ADDR=${EVD_NODE_ADDR:?} PREFIX=24

PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH

SETUP_NAME=setup-node
# shellcheck source=setup-lib.sh
. "$(dirname "$0")/setup-lib.sh" || { echo "setup-node: FAILED: no setup-lib.sh beside it"; exit 1; }

[ -d /run/evd-vm ] || fail "not inside the evd test VM (no /run/evd-vm)"
t0=$SECONDS

step "loading modules"
run modprobe -a virtio_net ib_uverbs rdma_ucm
load_driver "$DRIVER"
setsys net.core.netdev_max_backlog 100000

step "waiting for $NETDEV"
deadline=$((SECONDS + 20))
until [ -e "/sys/class/net/$NETDEV" ]; do
    [ "$SECONDS" -lt "$deadline" ] || fail "no $NETDEV after 20 s (is the VM's NIC there?)"
    sleep 0.1
done
echo 1 >"/proc/sys/net/ipv6/conf/$NETDEV/disable_ipv6" 2>/dev/null
printf '%s\n' "link set lo up" "addr add $ADDR/$PREFIX dev $NETDEV" "link set $NETDEV up" |
    ip -batch - || fail "cannot configure $NETDEV"

step "$DRIVER device $DEV on $NETDEV"
rdma link add "$DEV" type "$DRIVER" netdev "$NETDEV" || fail "rdma link add $DEV failed"

ready() { # ACTIVE, with the GID of ADDR (iWARP has no RoCE GIDs: siw's comes from the MAC)
    [[ "$(port_state "$DEV")" == *ACTIVE ]] && { [ "$DRIVER" = siw ] || has_gid "$DEV" "$ADDR"; }
}
deadline=$((SECONDS + 30))
until ready; do
    [ "$SECONDS" -lt "$deadline" ] || fail "$DEV not ACTIVE with the GID of $ADDR after 30 s: '$(port_state "$DEV")'"
    sleep 0.1
done
rdma link show
step "ready in $((SECONDS - t0)) s"
