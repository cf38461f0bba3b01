#!/bin/bash
# Soft-RoCE test network, run as root inside the evd test VM by guest-run
# (it can also be run by hand in any disposable Linux guest with rdma_rxe).
#
#   veth0 192.0.2.1/24  <-- veth pair -->  veth1 192.0.2.2/24
#   rxe0 (on veth0)                        rxe1 (on veth1)
#
# Both ends stay in the initial network namespace (rxe's UDP socket lives
# there).  Because both addresses are local, the kernel would route traffic
# between them over `lo` and rdma_cm address resolution between rxe1 and rxe0
# would time out; policy routing sends locally generated traffic from one
# address to the other out of its own veth instead (see README.md).
#
# Options: --no-check  skip the rdma_cm (rping) verification.
# The last line printed on failure says what went wrong.

set -u
set -o pipefail

DEV0=${EVD_VM_DEV0:-rxe0} DEV1=${EVD_VM_DEV1:-rxe1}
NETDEV0=${EVD_VM_NETDEV0:-veth0} NETDEV1=${EVD_VM_NETDEV1:-veth1}
ADDR0=${EVD_VM_ADDR0:-192.0.2.1} ADDR1=${EVD_VM_ADDR1:-192.0.2.2}
PREFIX=${EVD_VM_PREFIX:-24}
TABLE0=100 TABLE1=101
CHECK=1
[ "${1:-}" = --no-check ] && CHECK=0

PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH

step() { echo "setup-rxe: [$(cut -d' ' -f1 /proc/uptime)] $*"; }
fail() { echo "setup-rxe: FAILED: $*"; exit 1; }
run() { "$@" || fail "command failed: $*"; }
t0=$(date +%s.%N)

step "loading modules"
# rdma_rxe computes the ICRC with crc32, whose generic implementation it does
# not pull in by itself.
run modprobe crc32_generic
run modprobe -a veth rdma_rxe ib_uverbs rdma_ucm

step "sysctls"
# Large RDMA READ responses arrive as bursts of packets; at the default
# backlog (1000) the receive side drops some and the QP stalls in retries.
run sysctl -qw net.core.netdev_max_backlog=100000
run sysctl -qw net.ipv4.conf.all.rp_filter=0
run sysctl -qw net.ipv4.conf.default.rp_filter=0
run sysctl -qw net.ipv4.conf.all.accept_local=1
run sysctl -qw net.ipv4.conf.default.accept_local=1

step "veth pair $NETDEV0/$NETDEV1"
run ip link set lo up
run ip link add "$NETDEV0" type veth peer name "$NETDEV1"
for n in "$NETDEV0" "$NETDEV1"; do
    run sysctl -qw "net.ipv4.conf.$n.rp_filter=0"
    run sysctl -qw "net.ipv4.conf.$n.accept_local=1"
    # No IPv6 on the pair: nothing uses it and DAD only adds noise and
    # delayed GID table changes.
    sysctl -qw "net.ipv6.conf.$n.disable_ipv6=1" 2>/dev/null
done
run ip addr add "$ADDR0/$PREFIX" dev "$NETDEV0"
run ip addr add "$ADDR1/$PREFIX" dev "$NETDEV1"
run ip link set "$NETDEV0" up
run ip link set "$NETDEV1" up

step "policy routing"
# Locally generated traffic (iif lo) between the two addresses leaves by the
# sender's own veth; received packets (iif vethX) skip these rules and find
# their destination in the local table, which moves from preference 0 to
# 1000 so that the rules below come first.
#   100/101  from ADDR0 to ADDR1 -> out veth0, from ADDR1 to ADDR0 -> out veth1
#   102/103  an address to itself stays local (loopback on one rxe device)
#   110/111  no source chosen yet (connect/rdma_resolve_addr without a bind):
#            to ADDR0 -> out veth1 from ADDR1, to ADDR1 -> out veth0 from
#            ADDR0, so an unbound client reaches one device from the other
run ip rule add pref 100 iif lo from "$ADDR0" to "$ADDR1" lookup "$TABLE0"
run ip rule add pref 101 iif lo from "$ADDR1" to "$ADDR0" lookup "$TABLE1"
run ip rule add pref 102 from "$ADDR0" to "$ADDR0" lookup local
run ip rule add pref 103 from "$ADDR1" to "$ADDR1" lookup local
run ip rule add pref 110 iif lo to "$ADDR1" lookup "$TABLE0"
run ip rule add pref 111 iif lo to "$ADDR0" lookup "$TABLE1"
run ip route add table "$TABLE0" "$ADDR1" dev "$NETDEV0" src "$ADDR0"
run ip route add table "$TABLE1" "$ADDR0" dev "$NETDEV1" src "$ADDR1"
run ip rule add pref 1000 lookup local
run ip rule del pref 0 lookup local
ip rule show
ip route show table "$TABLE0"
ip route show table "$TABLE1"

step "rxe devices"
run rdma link add "$DEV0" type rxe netdev "$NETDEV0"
run rdma link add "$DEV1" type rxe netdev "$NETDEV1"

step "waiting for ACTIVE ports"
deadline=$(($(date +%s) + 30))
while :; do
    s0=$(rdma link show "$DEV0/1" 2>/dev/null)
    s1=$(rdma link show "$DEV1/1" 2>/dev/null)
    case "$s0" in *"state ACTIVE"*) case "$s1" in *"state ACTIVE"*) break ;; esac ;; esac
    [ "$(date +%s)" -lt "$deadline" ] ||
        fail "ports not ACTIVE after 30 s: '$s0' / '$s1'"
    sleep 0.2
done
rdma link show

# The IPv4-mapped GIDs appear asynchronously after the addresses.
gid_of() { cat "/sys/class/infiniband/$1/ports/1/gids/"* 2>/dev/null; }
v4gid() { # 192.0.2.1 -> 0000:0000:0000:0000:0000:ffff:c000:0201
    local IFS=.
    # shellcheck disable=SC2086
    set -- $1
    printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x\n' "$1" "$2" "$3" "$4"
}
deadline=$(($(date +%s) + 30))
# (no `| grep -q` on a pipeline here: with pipefail, cat's SIGPIPE fails it)
has_gid() { local g; g=$(gid_of "$1"); [[ "$g" == *"$(v4gid "$2")"* ]]; }
until has_gid "$DEV0" "$ADDR0" && has_gid "$DEV1" "$ADDR1"; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
        for d in "$DEV0" "$DEV1"; do echo "$d GIDs:"; gid_of "$d"; done
        fail "IPv4 GIDs of $ADDR0/$ADDR1 not in the GID tables after 30 s"
    fi
    sleep 0.2
done

if [ "$CHECK" = 1 ]; then
    step "verifying rdma_cm between $ADDR1 ($DEV1) and $ADDR0 ($DEV0)"
    tx0=$(cat "/sys/class/net/$NETDEV1/statistics/tx_packets")
    check_pair() { # server-address [client-source-address]
        local srv rc try bind=()
        [ -n "${2:-}" ] && bind=(-I "$2")
        for try in 1 2 3; do
            rc=1
            timeout 30 rping -s -a "$1" -C 1 -p 7471 >/dev/null 2>&1 &
            srv=$!
            sleep 0.5
            timeout 30 rping -c -a "$1" "${bind[@]}" -C 1 -p 7471 -V && rc=0
            wait "$srv" || rc=1
            [ "$rc" = 0 ] && return 0
            step "rping ${2:-(unbound)} -> $1 failed (try $try)"
            sleep 1
        done
        return 1
    }
    check_pair "$ADDR0" "$ADDR1" ||
        fail "rdma_cm connection from $ADDR1 ($DEV1) to $ADDR0 ($DEV0) does not work"
    check_pair "$ADDR1" "$ADDR0" ||
        fail "rdma_cm connection from $ADDR0 ($DEV0) to $ADDR1 ($DEV1) does not work"
    check_pair "$ADDR0" ||
        fail "rdma_cm connection from an unbound client to $ADDR0 ($DEV0) does not work"
    tx1=$(cat "/sys/class/net/$NETDEV1/statistics/tx_packets")
    [ "$tx1" -gt "$tx0" ] ||
        fail "rping worked but nothing was sent on $NETDEV1: traffic did not cross the veth pair"
fi

step "ready in $(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $t0 }") s"
