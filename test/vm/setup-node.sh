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

step() { echo "setup-node: [$(cut -d' ' -f1 /proc/uptime)] $*"; }
fail() { echo "setup-node: FAILED: $*"; exit 1; }
run() { "$@" || fail "command failed: $*"; }
setsys() { echo "$2" >"/proc/sys/${1//.//}" 2>/dev/null || fail "cannot set $1=$2"; }

[ -d /run/evd-vm ] || fail "not inside the evd test VM (no /run/evd-vm)"
t0=$SECONDS

step "loading modules"
run modprobe -a virtio_net ib_uverbs rdma_ucm
if [ "$DRIVER" = siw ]; then
    run modprobe -a ib_core libcrc32c
    grep -q '^siw ' /proc/modules || run insmod /run/evd-vm/siw.ko
else
    run modprobe crc32_generic
    run modprobe rdma_rxe
fi
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

port_state() { local st=; read -r st <"/sys/class/infiniband/$DEV/ports/1/state" 2>/dev/null; echo "$st"; }
v4gid() {
    local IFS=.
    # shellcheck disable=SC2086
    set -- $1
    printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x\n' "$1" "$2" "$3" "$4"
}
has_gid() {
    # iWARP has no RoCE GIDs: siw's GID is made from the MAC
    [ "$DRIVER" = siw ] && return 0
    local i g
    for i in {0..15}; do
        read -r g <"/sys/class/infiniband/$DEV/ports/1/gids/$i" 2>/dev/null || continue
        [ "$g" = "$(v4gid "$ADDR")" ] && return 0
    done
    return 1
}
deadline=$((SECONDS + 30))
until [[ "$(port_state)" == *ACTIVE ]] && has_gid; do
    [ "$SECONDS" -lt "$deadline" ] || fail "$DEV not ACTIVE with the GID of $ADDR after 30 s: '$(port_state)'"
    sleep 0.1
done
rdma link show
step "ready in $((SECONDS - t0)) s"
