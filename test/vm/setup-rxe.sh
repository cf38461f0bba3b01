#!/bin/bash
# Soft-RoCE test network, run as root inside the evd test VM by guest-run.
# With EVD_VM_DRIVER=siw the two devices are Soft-iWARP ones (siw0, siw1;
# the module run-in-vm built with build-siw.sh), on the same pair.
#
#   veth0 192.0.2.1/24  <-- veth pair -->  veth1 192.0.2.2/24
#   rxe0 (on veth0)                        rxe1 (on veth1)
#
# Both ends stay in the initial network namespace (rxe's UDP socket lives
# there).  Because both addresses are local, the kernel would route traffic
# between them over `lo` and rdma_cm address resolution between rxe1 and rxe0
# would time out; policy routing sends locally generated traffic from one
# address to the other out of a veth instead (see README.md).
#
# Options:
#   --no-check  skip the rdma_cm (rping) verification
#   --cross     also route traffic with no source address yet (an unbound
#               client) to one address out of the OTHER device (rules 110/111)
#   --force     run outside the evd VM (it rewrites the routing rules of the
#               machine it runs on: only in a disposable guest)
#   --renew     on a network already set up: delete rxe0 and rxe1 and add
#               them again. An rdma_cm message sent while veth0 is
#               administratively down (a process exiting then is enough)
#               leaves rxe's QP1 unable to carry connection management until
#               the device is re-created (docs/link-failures.md); suites that
#               flap the link renew the devices before each run.
# The last line printed on failure says what went wrong.

set -u
set -o pipefail

DRIVER=${EVD_VM_DRIVER:-rxe}
DEV0=${EVD_VM_DEV0:-${DRIVER}0} DEV1=${EVD_VM_DEV1:-${DRIVER}1}
NETDEV0=${EVD_VM_NETDEV0:-veth0} NETDEV1=${EVD_VM_NETDEV1:-veth1}
ADDR0=${EVD_VM_ADDR0:-192.0.2.1} ADDR1=${EVD_VM_ADDR1:-192.0.2.2}
PREFIX=${EVD_VM_PREFIX:-24}
TABLE0=100 TABLE1=101
CHECK=1 FORCE=0 CROSS=0 RENEW=0
for a in "$@"; do
    case "$a" in
    --no-check) CHECK=0 ;;
    --cross) CROSS=1 ;;
    --force) FORCE=1 ;;
    --renew) RENEW=1 ;;
    *) echo "setup-rxe: unknown argument $a"; exit 2 ;;
    esac
done

PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH

SETUP_NAME=setup-rxe
# shellcheck source=setup-lib.sh
. "$(dirname "$0")/setup-lib.sh" || { echo "setup-rxe: FAILED: no setup-lib.sh beside it"; exit 1; }

if [ "$FORCE" != 1 ] && [ ! -d /run/evd-vm ]; then
    fail "not inside the evd test VM (no /run/evd-vm); use --force in a disposable guest only"
fi
t0=$SECONDS

if [ "$RENEW" = 1 ]; then
step "deleting $DEV0 and $DEV1 (waits until no process uses them)"
printf '%s\n' "link delete $DEV0" "link delete $DEV1" | rdma -b - || fail "rdma link delete failed"
else
step "loading modules"
run modprobe -a veth ib_uverbs rdma_ucm
load_driver "$DRIVER"

step "sysctls"
# Large RDMA READ responses arrive as bursts of packets; at the default
# backlog (1000) the receive side drops some and the QP stalls in retries.
setsys net.core.netdev_max_backlog 100000
for c in all default; do
    setsys "net.ipv4.conf.$c.rp_filter" 0
    setsys "net.ipv4.conf.$c.accept_local" 1
done

step "veth pair $NETDEV0/$NETDEV1"
printf '%s\n' \
    "link set lo up" \
    "link add $NETDEV0 type veth peer name $NETDEV1" |
    ip -batch - || fail "cannot create the veth pair"
for n in "$NETDEV0" "$NETDEV1"; do
    setsys "net.ipv4.conf.$n.rp_filter" 0
    setsys "net.ipv4.conf.$n.accept_local" 1
    # No IPv6 on the pair: nothing uses it and DAD only adds noise and
    # delayed GID table changes.
    echo 1 >"/proc/sys/net/ipv6/conf/$n/disable_ipv6" 2>/dev/null
done

step "addresses and policy routing"
# Locally generated traffic (iif lo) between the two addresses leaves by a
# veth; received packets (iif vethX) skip these rules and find their
# destination in the local table, which moves from preference 0 to 1000 so
# that the rules below come first.
#   100/101  from ADDR0 to ADDR1 -> out veth0, from ADDR1 to ADDR0 -> out veth1
#   102/103  an address to itself stays local (loopback on one rxe device)
#   110/111  only with --cross: no source chosen yet (connect or
#            rdma_resolve_addr without a bind): to ADDR1 -> out veth0 from
#            ADDR0, to ADDR0 -> out veth1 from ADDR1, so an unbound client
#            reaches one device from the other.  Without them an unbound
#            client of ADDR0 is routed via lo and uses rxe0 itself (rxe
#            loopback), and fi_getinfo(node=ADDR0) resolves to rxe0.
cross_rules=()
if [ "$CROSS" = 1 ]; then
    cross_rules=(
        "rule add pref 110 iif lo to $ADDR1 lookup $TABLE0"
        "rule add pref 111 iif lo to $ADDR0 lookup $TABLE1"
    )
fi
printf '%s\n' \
    "addr add $ADDR0/$PREFIX dev $NETDEV0" \
    "addr add $ADDR1/$PREFIX dev $NETDEV1" \
    "link set $NETDEV0 up" \
    "link set $NETDEV1 up" \
    "rule add pref 100 iif lo from $ADDR0 to $ADDR1 lookup $TABLE0" \
    "rule add pref 101 iif lo from $ADDR1 to $ADDR0 lookup $TABLE1" \
    "rule add pref 102 from $ADDR0 to $ADDR0 lookup local" \
    "rule add pref 103 from $ADDR1 to $ADDR1 lookup local" \
    "${cross_rules[@]}" \
    "route add table $TABLE0 $ADDR1 dev $NETDEV0 src $ADDR0" \
    "route add table $TABLE1 $ADDR0 dev $NETDEV1 src $ADDR1" \
    "rule add pref 1000 lookup local" \
    "rule del pref 0 lookup local" |
    ip -batch - || fail "cannot set up the addresses and policy routing"
printf '%s\n' "rule show" "route show table $TABLE0" "route show table $TABLE1" |
    ip -batch -

fi

step "$DRIVER devices"
printf '%s\n' \
    "link add $DEV0 type $DRIVER netdev $NETDEV0" \
    "link add $DEV1 type $DRIVER netdev $NETDEV1" |
    rdma -b - || fail "rdma link add failed"

step "waiting for ACTIVE ports and IPv4 GIDs"
deadline=$((SECONDS + 30))
until [[ "$(port_state "$DEV0")" == *ACTIVE && "$(port_state "$DEV1")" == *ACTIVE ]]; do
    [ "$SECONDS" -lt "$deadline" ] ||
        fail "ports not ACTIVE after 30 s: $DEV0 '$(port_state "$DEV0")', $DEV1 '$(port_state "$DEV1")'"
    sleep 0.1
done
step "ports ACTIVE"
# The IPv4-mapped GIDs appear asynchronously after the addresses (iWARP has
# no RoCE GIDs: siw's one GID comes from the MAC).
until [ "$DRIVER" = siw ] || { has_gid "$DEV0" "$ADDR0" && has_gid "$DEV1" "$ADDR1"; }; do
    if [ "$SECONDS" -ge "$deadline" ]; then
        for d in "$DEV0" "$DEV1"; do echo "$d GIDs:"; gid_of "$d"; done
        fail "IPv4 GIDs of $ADDR0/$ADDR1 not in the GID tables after 30 s"
    fi
    sleep 0.1
done
rdma link show

if [ "$CHECK" = 1 ]; then
    step "verifying rdma_cm between $ADDR1 ($DEV1) and $ADDR0 ($DEV0)"
    read -r tx0 <"/sys/class/net/$NETDEV1/statistics/tx_packets"
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
    # Bound, rxe1 -> rxe0 (rule 101) ...
    check_pair "$ADDR0" "$ADDR1" ||
        fail "rdma_cm connection from $ADDR1 ($DEV1) to $ADDR0 ($DEV0) does not work"
    read -r tx1 <"/sys/class/net/$NETDEV1/statistics/tx_packets"
    [ "$tx1" -gt "$tx0" ] ||
        fail "rping worked but nothing was sent on $NETDEV1: traffic did not cross the veth pair"
    if [ "$CROSS" = 1 ]; then
        # ... and unbound, which must come from rxe0 (rule 110) ...
        check_pair "$ADDR1" ||
            fail "rdma_cm connection from an unbound client to $ADDR1 ($DEV1) does not work"
    else
        # ... and bound, rxe0 -> rxe1 (rule 100).
        check_pair "$ADDR1" "$ADDR0" ||
            fail "rdma_cm connection from $ADDR0 ($DEV0) to $ADDR1 ($DEV1) does not work"
    fi
fi

step "ready in $((SECONDS - t0)) s"
