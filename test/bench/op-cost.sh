#!/usr/bin/env bash
# What one data-path operation costs, counted (test/bench/op_cost.cpp):
# instructions per operation by callgrind (the four counted functions,
# --toggle-collect, each one's inclusive count), and system calls per
# operation by strace (every thread, between op_cost's markers around its
# loop). Contestants: libfabric's verbs, evd, and evd with
# resumable connections (FI_EVD_RESUME_TIMEOUT), on the same rxe device;
# in "split", also the bare floor: the same work requests with no provider
# (test/bench/floor_cost.cpp, rdma-core alone).
# Then a registration-cache hit (fi_mr_reg of a cached page, fi_close):
# instructions, system calls, and heap allocations per hit (memcheck's
# count of a run of 2N hits less one of N, divided by N: exact). Valgrind
# answers userfaultfd with ENOSYS, which turns both providers' caches off,
# so its runs of the hit preload uffd_shim.so (a stand-in userfaultfd that
# never reports an event; the loop unmaps nothing); strace's run is native.
# A benchmark, not a test: it judges nothing; its table goes to docs/.
#
#   test/bench/op-cost.sh BUILD_DIR [N]      (on the host: boots the VM)
#   EVD_OP_COST_OPS="split rxm mr-hit"       only these (default: all)
#   EVD_VM_ROOT=DIR                          boot that Debian's userland
#                                            (BUILD_DIR built in it)
# "more" is the FI_MORE table: 8 B sends in batches of 1, 16 and 64, all
# but the last of each batch with FI_MORE, per send: the posting calls'
# instructions, system calls, and the message rate of a timed run
# (op_cost -r, median of three 3 s runs) with the share of its time spent
# in the posting calls.
set -u
build=$(cd "${1:?usage: op-cost.sh BUILD_DIR [iterations]}" && pwd)
n=${2:-400}
top=$(cd "$(dirname "$0")/../.." && pwd)
if [ -z "${EVD_VM_ADDR0:-}" ]; then
    # valgrind has no userfaultfd: the registration cache's monitor gets a
    # stand-in under it (uffd_shim.so, from uffd_shim.c), or the hit would
    # not be one
    [ -n "${EVD_VM_ROOT:-}" ] || make -s -C "$build" op_cost rxm_cost floor_cost uffd_shim.so >/dev/null || exit 1
    # EVD_VM_ROOT=DIR: that Debian's userland in the guest (its libfabric;
    # BUILD_DIR then a build made in it, as test/run-all.sh's build-d13)
    exec env EVD_VM_TIMEOUT=${EVD_VM_TIMEOUT:-3600} "$top/test/vm/run-in-vm" ${EVD_VM_ROOT:+--root "$EVD_VM_ROOT"} \
        --cpus 2 --share "$build" --share "$top" -- \
        bash "$top/test/bench/op-cost.sh" "$build" "$n"
fi
export FI_PROVIDER_PATH="$build/.libs"
ulimit -l unlimited 2>/dev/null || true
cd /tmp || exit 1
bin="$build/op_cost"

# One callgrind run counting the four cost_* functions (--toggle-collect),
# divided by the iterations, printed "post tx rx repost".
per_op() {  # per_op ENV... -- ARGS...
    local envs=()
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    local out=/tmp/op-cost.cg
    rm -f "$out"
    if ! env "${envs[@]}" valgrind --tool=callgrind --toggle-collect='*::cost_*' \
        --callgrind-out-file="$out" "$bin" "$@" -n "$n" >/dev/null 2>&1; then
        echo "- - - -"
        return
    fi
    # post and the two reads from their inclusive counts; the repost is what
    # the four together (the run's total, exact) leave: its inclusive line
    # is not always named alike in callgrind_annotate's listing.
    local total
    total=$(awk '/^summary:/ { print $2 }' "$out")
    callgrind_annotate --inclusive=yes --threshold=100 "$out" 2>/dev/null | awk -v n="$n" -v all="$total" '
        { gsub(",", "", $1) }
        /::cost_post\(/      { if ($1 + 0 > p) p = $1 + 0 }
        /::cost_reap_tx\(/   { if ($1 + 0 > t) t = $1 + 0 }
        /::cost_reap_rx\(/   { if ($1 + 0 > r) r = $1 + 0 }
        END { printf "%.0f %.0f %.0f %.0f", p / n, t / n, r / n, (all - p - t - r) / n }'
}

# System calls of the loop, every thread, per iteration: strace -f between
# op_cost's two getppid() markers.
sys_per_op() {  # sys_per_op ENV... -- ARGS...
    local envs=()
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    rm -f /tmp/op-cost.st
    if ! env "${envs[@]}" strace -f -o /tmp/op-cost.st "$bin" "$@" -n "$n" >/dev/null 2>&1; then
        echo "-"
        return
    fi
    awk -v n="$n" '/getppid\(/ { m++; next } m == 1 && !/resumed>|exited with|\+\+\+/ { c++ }
        END { printf "%.2f", c / n }' /tmp/op-cost.st
}

# Heap allocations per iteration: memcheck's "total heap usage" of a run of
# 2N iterations less that of a run of N (the setup's cancel out), over N.
allocs_per_op() {  # allocs_per_op ENV... -- ARGS...
    local envs=()
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    local a b
    a=$(env "${envs[@]}" LD_PRELOAD="$build/uffd_shim.so" valgrind --tool=memcheck --leak-check=no "$bin" "$@" -n "$n" 2>&1 |
        awk '/total heap usage:/ { gsub(",", "", $5); print $5 }')
    b=$(env "${envs[@]}" LD_PRELOAD="$build/uffd_shim.so" valgrind --tool=memcheck --leak-check=no "$bin" "$@" -n $((2 * n)) 2>&1 |
        awk '/total heap usage:/ { gsub(",", "", $5); print $5 }')
    if [ -z "$a" ] || [ -z "$b" ]; then echo "-"; return; fi
    awk -v a="$a" -v b="$b" -v n="$n" 'BEGIN { printf "%.2f", (b - a) / n }'
}

ops=${EVD_OP_COST_OPS:-split rxm send inject write read mr-hit more}
echo "# op_cost: $n iterations each, $(uname -r), $(ibv_devices 2>/dev/null | awk 'NR==3{print $1}'), libfabric $(fi_info --version 2>/dev/null | awk '/^libfabric:/ {print $2}')"

# "split": every loop of op_cost -o all in one callgrind run per provider,
# each instruction given to whoever's code ran it (test/gate/callgrind-split.awk,
# as the count gate does): rdma-core's (libibverbs and the rxe driver: the
# floor, what the same work request costs with no provider), the
# provider's, op_cost's own. Instructions per operation (batch: per send).
case " $ops " in *" split "*)
    declare -A prov_of rdma_of
    for who in verbs evd; do
        rm -f /tmp/op-cost-split.cg
        env -i PATH="$PATH" FI_PROVIDER_PATH="$FI_PROVIDER_PATH" EVD_VM_ADDR0="$EVD_VM_ADDR0" \
            EVD_VM_ADDR1="$EVD_VM_ADDR1" FI_EVD_RESUME_TIMEOUT=0 LD_BIND_NOW=1 \
            LD_PRELOAD="$build/uffd_shim.so" setarch -R valgrind --tool=callgrind --separate-callers=40 \
            --toggle-collect='*::cost_*' --callgrind-out-file=/tmp/op-cost-split.cg \
            "$bin" -p "$who" -o all -b 16 -n "$n" -w 3000 >/dev/null 2>&1
        while read -r ph _ p _ r _ _ _ _; do
            d=$n; case $ph in batch.*) d=$((n * 16)) ;; esac
            prov_of[$who.$ph]=$(( (p + d / 2) / d )) rdma_of[$who.$ph]=$(( (r + d / 2) / d ))
        done < <(awk -f "$top/test/gate/callgrind-split.awk" /tmp/op-cost-split.cg 2>/dev/null)
    done
    # the bare floor: the same work requests with no provider
    # (test/bench/floor_cost.cpp); what it leaves to "provider" must be 0
    declare -A floor_of
    rm -f /tmp/op-cost-floor.cg
    env -i PATH="$PATH" EVD_VM_ADDR0="$EVD_VM_ADDR0" EVD_VM_ADDR1="$EVD_VM_ADDR1" LD_BIND_NOW=1 \
        setarch -R valgrind --tool=callgrind --separate-callers=40 --toggle-collect='*::cost_*' \
        --callgrind-out-file=/tmp/op-cost-floor.cg "$build/floor_cost" -o all -n "$n" -w 3000 2>&1 |
        grep '^floor_cost:' | sed 's/^/# /'
    while read -r ph _ p _ r _ _ _ _; do
        d=$n; case $ph in batch.*) d=$((n * 16)) ;; esac
        floor_of[$ph]=$(( (r + d / 2) / d ))
        [ "$p" = 0 ] || echo "# floor_cost: $ph has $p instructions outside rdma-core and itself (the split is wrong)"
    done < <(awk -f "$top/test/gate/callgrind-split.awk" /tmp/op-cost-floor.cg 2>/dev/null)
    echo
    echo "| operation (loop.call) | bare rdma-core (floor_cost) | rdma-core under verbs | rdma-core under evd | verbs | evd | evd / verbs |"
    echo "|---|---|---|---|---|---|---|"
    for ph in send.post inject.post write.post read.post send.repost send.reap_tx send.reap_rx \
        inject.reap_tx write.reap_tx read.reap_tx mr_hit.mr_reg mr_hit.mr_close \
        batch.post_batch batch.repost_batch batch.reap_tx burst16.reap_many_tx burst16.reap_many_rx \
        burst64.reap_many_tx burst64.reap_many_rx eq.eq_read; do
        v=${prov_of[verbs.$ph]:--} e=${prov_of[evd.$ph]:--}
        ratio=$(awk -v v="$v" -v e="$e" 'BEGIN { if (v + 0 > 0 && e != "-") printf "%.2f", e / v; else print "-" }')
        echo "| $ph | ${floor_of[$ph]:--} | ${rdma_of[verbs.$ph]:--} | ${rdma_of[evd.$ph]:--} | $v | $e | $ratio |"
    done
    ;;
esac

# "rxm": tagged sends through ofi_rxm (test/bench/rxm_cost.cpp), as MPI
# uses a provider: each instruction of the provider split between rxm
# (with libfabric's util code it calls) and the core provider below it
# (callgrind-split.awk -v rxm=1). Instructions per operation.
# FI_UNIVERSE_SIZE=4: rxm sizes its core CQ from it, and its default (256)
# asks verbs for more entries than rxe has (as test/mpi/run-mpi.sh).
# verbs and rxm are both inside libfabric.so, and Debian's is stripped of
# the names of its static functions (vrb_*, rxm_*), so the split needs a
# libfabric of the same version built with its symbols:
# EVD_LIBFABRIC_LIB=DIR (its lib directory, e.g. a build of the v1.17.0 tag
# under /opt; not part of the project) runs both contestants on it. Without
# it everything in libfabric.so counts as rxm's ("verbs below rxm" 0).
case " $ops " in *" rxm "*)
    declare -A core_of rxm_of rrdma_of
    for who in verbs evd; do
        rm -f /tmp/rxm-cost.cg
        env -i PATH="$PATH" FI_PROVIDER_PATH="$FI_PROVIDER_PATH" EVD_VM_ADDR0="$EVD_VM_ADDR0" \
            EVD_VM_ADDR1="$EVD_VM_ADDR1" FI_EVD_RESUME_TIMEOUT=0 LD_BIND_NOW=1 FI_UNIVERSE_SIZE=4 \
            ${EVD_LIBFABRIC_LIB:+LD_LIBRARY_PATH="$EVD_LIBFABRIC_LIB"} \
            setarch -R valgrind --tool=callgrind --separate-callers=40 \
            --toggle-collect='*::cost_*' --callgrind-out-file=/tmp/rxm-cost.cg \
            "$build/rxm_cost" -p "$who;ofi_rxm" -o all -n "$n" -w 3000 2>&1 | grep '^rxm_cost' | sed 's/^/# /'
        while read -r ph _ _ _ r _ _ _ _ _ c _ x; do
            core_of[$who.$ph]=$(( (c + n / 2) / n )) rxm_of[$who.$ph]=$(( (x + n / 2) / n ))
            rrdma_of[$who.$ph]=$(( (r + n / 2) / n ))
        done < <(awk -v rxm=1 -f "$top/test/gate/callgrind-split.awk" /tmp/rxm-cost.cg 2>/dev/null)
    done
    echo
    echo "| operation (loop.call) | rdma-core under verbs / evd | rxm over verbs | verbs below rxm | rxm over evd | evd below rxm | evd / verbs below rxm |"
    echo "|---|---|---|---|---|---|---|"
    for ph in tsend.post tsend.reap_tx tsend.reap_rx tsend.repost tinject.post tinject.reap_tx \
        tinject.reap_rx tinject.repost; do
        v=${core_of[verbs.$ph]:--} e=${core_of[evd.$ph]:--}
        ratio=$(awk -v v="$v" -v e="$e" 'BEGIN { if (v + 0 > 0 && e != "-") printf "%.2f", e / v; else print "-" }')
        echo "| $ph | ${rrdma_of[verbs.$ph]:--} / ${rrdma_of[evd.$ph]:--} | ${rxm_of[verbs.$ph]:--} | $v | ${rxm_of[evd.$ph]:--} | $e | $ratio |"
    done
    ;;
esac

case " $ops " in *" send "* | *" inject "* | *" write "* | *" read "*)
    echo
    echo "| operation | contestant | post | client CQ read | server CQ read | receive repost | total | system calls |"
    echo "|---|---|---|---|---|---|---|---|"
    ;;
esac
for o in $ops; do
    case $o in mr-hit|more|split|rxm) continue ;; esac
    for who in verbs evd evd-resume; do
        prov=${who%-resume}
        envs=(FI_EVD_RESUME_TIMEOUT=0)
        [ "$who" = evd-resume ] && envs=(FI_EVD_RESUME_TIMEOUT=30000)
        read -r post tx rx rp <<<"$(per_op "${envs[@]}" -- -p "$prov" -o "$o")"
        total=$(awk -v a="$post" -v b="$tx" -v c="$rx" -v d="$rp" 'BEGIN { printf "%d", a + b + c + d }')
        sys=$(sys_per_op "${envs[@]}" -- -p "$prov" -o "$o")
        echo "| $o | $who | $post | $tx | $rx | $rp | $total | $sys |"
    done
done

case " $ops " in *" mr-hit "*)
    echo
    echo "| registration-cache hit | contestant | fi_mr_reg | fi_close | total | system calls | allocations |"
    echo "|---|---|---|---|---|---|---|"
    for who in verbs evd; do
        out=/tmp/op-cost.cg
        rm -f "$out"
        reg=- cls=-
        if LD_PRELOAD="$build/uffd_shim.so" valgrind --tool=callgrind --toggle-collect='*::cost_*' \
            --callgrind-out-file="$out" "$bin" -p "$who" -o mr-hit -n "$n" >/dev/null 2>&1; then
            read -r reg cls <<<"$(callgrind_annotate --inclusive=yes --threshold=100 "$out" 2>/dev/null |
                awk -v n="$n" '{ gsub(",", "", $1) }
                    /::cost_mr_reg\(/   { if ($1 + 0 > g) g = $1 + 0 }
                    /::cost_mr_close\(/ { if ($1 + 0 > c) c = $1 + 0 }
                    END { printf "%.0f %.0f", g / n, c / n }')"
        fi
        total=$(awk -v a="$reg" -v b="$cls" 'BEGIN { printf "%d", a + b }')
        sys=$(sys_per_op FI_EVD_RESUME_TIMEOUT=0 -- -p "$who" -o mr-hit)
        al=$(allocs_per_op FI_EVD_RESUME_TIMEOUT=0 -- -p "$who" -o mr-hit)
        echo "| mr-hit | $who | $reg | $cls | $total | $sys | $al |"
    done
    ;;
esac

case " $ops " in *" more "*)
    echo
    echo "| FI_MORE batch | contestant | post, instructions per send | repost, instructions per receive | system calls per send | message rate (msg/s) | time posting |"
    echo "|---|---|---|---|---|---|---|"
    for who in verbs evd; do
        for b in 1 16 64; do
            out=/tmp/op-cost.cg
            rm -f "$out"
            post=- rep=-
            nb=$(( (n + b - 1) / b ))
            if FI_EVD_RESUME_TIMEOUT=0 valgrind --tool=callgrind --toggle-collect='*::cost_*' \
                --callgrind-out-file="$out" "$bin" -p "$who" -o send -b "$b" -n "$nb" >/dev/null 2>&1; then
                read -r post rep <<<"$(callgrind_annotate --inclusive=yes --threshold=100 "$out" 2>/dev/null |
                    awk -v n=$((nb * b)) '{ gsub(",", "", $1) }
                        /::cost_post_batch\(/   { if ($1 + 0 > p) p = $1 + 0 }
                        /::cost_repost_batch\(/ { if ($1 + 0 > r) r = $1 + 0 }
                        END { printf "%.0f %.0f", p / n, r / n }')"
            fi
            rm -f /tmp/op-cost.st
            sys=-
            if FI_EVD_RESUME_TIMEOUT=0 strace -f -o /tmp/op-cost.st "$bin" -p "$who" -o send -b "$b" -n "$nb" >/dev/null 2>&1; then
                sys=$(awk -v n=$((nb * b)) '/getppid\(/ { m++; next } m == 1 && /(write|ioctl)\(/ && !/resumed>/ { c++ }
                    END { printf "%.3f", c / n }' /tmp/op-cost.st)
            fi
            rates=() shares=()
            for _ in 1 2 3; do
                read -r r sh <<<"$(FI_EVD_RESUME_TIMEOUT=0 timeout 60 "$bin" -p "$who" -o send -b "$b" -r 3 2>/dev/null |
                    sed -n 's/.*rate \([0-9]*\) msg\/s, \([0-9.]*\)% .*/\1 \2/p')"
                rates+=("${r:-0}") shares+=("${sh:-0}")
            done
            med=$(printf '%s\n' "${rates[@]}" | sort -n | sed -n 2p)
            shm=$(printf '%s\n' "${shares[@]}" | sort -n | sed -n 2p)
            echo "| $b | $who | $post | $rep | $sys | $med (${rates[*]}) | ${shm}% |"
        done
    done
    ;;
esac
