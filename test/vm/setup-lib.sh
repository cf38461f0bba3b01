# shellcheck shell=bash
# Helpers of the guest's network setups (setup-rxe.sh, setup-node.sh), which
# source this file from their own directory. SETUP_NAME prefixes messages.

step() { echo "$SETUP_NAME: [$(cut -d' ' -f1 /proc/uptime)] $*"; }
fail() { echo "$SETUP_NAME: FAILED: $*"; exit 1; }
run() { "$@" || fail "command failed: $*"; }
# Few processes below: every exec reads its binary over 9p, under emulation.
setsys() { # NAME VALUE: sysctl without a fork
    echo "$2" >"/proc/sys/${1//.//}" 2>/dev/null || fail "cannot set $1=$2"
}

port_state() { # DEV -> e.g. "4: ACTIVE"
    local st=
    read -r st <"/sys/class/infiniband/$1/ports/1/state" 2>/dev/null
    echo "$st"
}
gid_of() { # DEV: the first 16 entries of the port's GID table, one per line
    # (rxe has 1024 entries: reading all of them on every poll costs seconds)
    local i g
    for i in {0..15}; do
        read -r g <"/sys/class/infiniband/$1/ports/1/gids/$i" 2>/dev/null && echo "$g"
    done
}
v4gid() { # 192.0.2.1 -> 0000:0000:0000:0000:0000:ffff:c000:0201
    local IFS=.
    # shellcheck disable=SC2086
    set -- $1
    printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x\n' "$1" "$2" "$3" "$4"
}
has_gid() { local g; g=$(gid_of "$1"); [[ "$g" == *"$(v4gid "$2")"* ]]; }

load_driver() { # rxe | siw: the soft RDMA driver's modules (siw.ko from run-in-vm's run directory)
    if [ "$1" = siw ]; then
        run modprobe -a ib_core libcrc32c
        grep -q '^siw ' /proc/modules || run insmod /run/evd-vm/siw.ko
    else
        # rdma_rxe computes the ICRC with crc32, whose generic implementation
        # it does not pull in by itself.
        run modprobe crc32_generic
        run modprobe rdma_rxe
    fi
}
