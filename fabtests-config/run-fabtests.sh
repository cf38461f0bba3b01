#!/bin/bash
# Runs stock fabtests (libfabric 1.17.0 or 2.1.0, built outside this
# repository) on evd inside the Soft-RoCE VM: server on EVD_VM_ADDR0 (rxe0),
# client from EVD_VM_ADDR1 (rxe1). See README.md.
#
#   test/vm/run-in-vm -- fabtests-config/run-fabtests.sh [BUILD_DIR] [-- RUNFABTESTS_ARGS...]
#
# Across two nodes of the multi-node bed (test/vm/run-nodes), run on both:
# servers on node A (0), clients on node B (1), each on its own kernel and
# device; runfabtests.sh runs on B and reaches both nodes through
# test/vm/node-exec, which stands in for its ssh.
#
#   test/vm/run-nodes [--driver siw] --mem 5G -- fabtests-config/run-fabtests.sh BUILD_DIR
#
# BUILD_DIR: the evd build directory whose .libs holds libevd-fi.so
# (default: $EVD_BUILD_DIR, else ./build). FABTESTS_BIN: directory with the
# fabtests binaries and runfabtests.sh (default /opt/fabtests/bin; the
# Debian 13 root has fabtests 2.1.0 in /opt/fabtests-2.1/bin).
# FABTESTS_SETS: test sets (default "unit,functional,short").
# FABTESTS_PROVIDERS: the passes to run, separated by spaces (default
# "evd evd;ofi_rxm"; one of them alone lets two VMs run the passes at once).
# Exclude file: exclude-evd-VER.txt for "evd", exclude-evd-rxm-VER.txt for
# "evd;...", where VER is FABTESTS_VERSION (default: major.minor of the
# installed libfabric, `fi_info --version`, which the fabtests are built
# against: 1.17 on Debian 12, 2.1 on Debian 13), falling back to
# exclude-evd.txt / exclude-evd-rxm.txt (the 1.17 lists) when there is no
# such file; fabtests' own test_configs/NAME/NAME.exclude (NAME: the utility
# provider if any, else the core one, as runfabtests.sh's auto-exclusion
# picks it) for any other provider, e.g. "verbs" or "verbs;ofi_rxm" for
# comparison; FABTESTS_EXCLUDE=FILE uses FILE for every pass instead.
# Memory: fi_rdm_atomic allocates ~3 GiB per process (its buffers are sized
# for fabtests' largest message times the window) and runs server and client
# in the same VM: give the VM 10G (EVD_VM_MEM=10G), 4G ends in the OOM killer;
# across nodes each node runs one of them (run-nodes --mem 5G).
# Exit status: 0 when no selected test failed.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
build=${EVD_BUILD_DIR:-$top/build}
if [ $# -gt 0 ] && [ "$1" != "--" ]; then
    build=$1
    shift
fi
[ "${1:-}" = "--" ] && shift
bin=${FABTESTS_BIN:-/opt/fabtests/bin}
sets=${FABTESTS_SETS:-unit,functional,short}
nexec=$top/test/vm/node-exec
if [ -n "${EVD_NODE:-}" ]; then
    : "${EVD_NODE_CTL:?}"
    ctl=$EVD_NODE_CTL
    server_addr=198.51.100.1 client_addr=198.51.100.2
    hosts=(evd-node-0 evd-node-1)
    min_kb=4000000
else
    : "${EVD_VM_ADDR0:?run inside the evd VM (test/vm/run-in-vm) or on the nodes of test/vm/run-nodes}"
    : "${EVD_VM_ADDR1:?run inside the evd VM (test/vm/run-in-vm)}"
    server_addr=$EVD_VM_ADDR0 client_addr=$EVD_VM_ADDR1
    hosts=()
    min_kb=8000000
fi

[ -f "$build/.libs/libevd-fi.so" ] || { echo "no $build/.libs/libevd-fi.so: build evd first" >&2; exit 2; }
[ -x "$bin/runfabtests.sh" ] || { echo "no fabtests in $bin (see README.md)" >&2; exit 2; }

export FI_PROVIDER_PATH="$build/.libs"
# verbs, for comparison, on this node's device only
[ -n "${EVD_NODE_NETDEV:-}" ] && export FI_VERBS_IFACE=$EVD_NODE_NETDEV
# Queue depths: evd's defaults (FI_EVD_TX_SIZE/FI_EVD_RX_SIZE, 384 when the
# hints leave them at 0); set those variables to try others.
ulimit -l unlimited 2>/dev/null || true

rc=0
mem_kb=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
[ "${mem_kb:-0}" -lt "$min_kb" ] &&
    echo "# warning: $((mem_kb / 1024)) MiB of memory; fi_rdm_atomic needs ~3 GiB per process" >&2

if [ -n "${EVD_NODE:-}" ]; then
    # every node runs what runfabtests.sh sends it, until B is done
    "$nexec" serve &
    "$top/test/vm/node-ctl" post "fabtests-serving-$EVD_NODE"
    if [ "$EVD_NODE" != 1 ]; then
        "$top/test/vm/node-ctl" wait fabtests-done 86400 >/dev/null
        "$nexec" stop
        wait
        exit 0
    fi
    trap '"$top/test/vm/node-ctl" post fabtests-done; "$nexec" stop' EXIT
    # runfabtests.sh gives a server one second before its client starts
    "$top/test/vm/node-ctl" wait fabtests-serving-0 300 >/dev/null ||
        { echo "node A does not run commands" >&2; exit 1; }
    # runfabtests.sh reaches the server and client hosts with
    # "ssh -n -o ... HOST COMMAND": here that is node-exec HOST COMMAND. (A
    # server runfabtests.sh kills with -9 kills only its `timeout`: the
    # node-exec under it waits until the test's cleanup kills the fi_
    # process on that node.)
    mkdir -p "$ctl/fabtests-ssh"
    cat >"$ctl/fabtests-ssh/ssh" <<EOF
#!/bin/bash
while [ \$# -gt 0 ]; do
    case \$1 in -o) shift 2 ;; -*) shift ;; *) break ;; esac
done
host=\$1
shift
exec "$nexec" "\$host" "\$*"
EOF
    chmod +x "$ctl/fabtests-ssh/ssh"
    export PATH=$ctl/fabtests-ssh:$PATH
fi
ver=${FABTESTS_VERSION:-$(fi_info --version 2>/dev/null |
    sed -n 's/^libfabric: *\([0-9]*\.[0-9]*\).*/\1/p')}
pick() { # pick BASE: BASE-$ver.txt if there is one, else BASE.txt
    if [ -n "$ver" ] && [ -f "$here/$1-$ver.txt" ]; then echo "$here/$1-$ver.txt"; else echo "$here/$1.txt"; fi
}
IFS=' ' read -r -a provs <<< "${FABTESTS_PROVIDERS:-evd evd;ofi_rxm}"
for prov in "${provs[@]}"; do
    case "$prov" in
    evd) excl=$(pick exclude-evd) ;;
    "evd;"*) excl=$(pick exclude-evd-rxm) ;;
    *) name=${prov##*;}
       excl="$bin/../share/fabtests/test_configs/$name/$name.exclude" ;;
    esac
    [ -n "${FABTESTS_EXCLUDE:-}" ] && excl=$FABTESTS_EXCLUDE
    [ -f "$excl" ] || { echo "no exclude file $excl" >&2; rc=1; continue; }
    echo "# runfabtests.sh: provider '$prov', sets $sets, excluded: $excl, start $(date -u +%H:%M:%S)"
    "$bin/runfabtests.sh" -p "$bin/" -v -T "${FABTESTS_TIMEOUT:-120}" \
        -s "$server_addr" -c "$client_addr" -g "$server_addr" \
        -t "$sets" -f "$excl" "$@" "$prov" "${hosts[@]}" || rc=1
    echo "# provider '$prov' done $(date -u +%H:%M:%S)"
done
exit $rc
