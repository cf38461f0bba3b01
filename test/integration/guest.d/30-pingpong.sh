#!/usr/bin/env bash
# Stock fi_pingpong from this userland's libfabric-bin over evd MSG
# endpoints: server on rxe0 (its address), client resolved by rdma_cm, 20 checked (-c) 64-byte
# round trips. With EVD_VERBS_BESIDE=1 (test/bench/verbs-beside.sh) the same
# run over libfabric's verbs is printed as a comment beside it (a report, not
# a test of verbs; the test command leaves it out).
set -u
run_pp() {  # run_pp PROV: prints the client's output, returns its status
    local prov=$1 port=$((47000 + RANDOM % 1000)) out rc
    timeout 120 fi_pingpong -p "$prov" -e msg -B "$port" -I 20 -S 64 -c \
        >/tmp/pp-server.$$ 2>&1 &
    local srv=$!
    sleep 1
    out=$(timeout 120 fi_pingpong -p "$prov" -e msg -P "$port" -I 20 -S 64 -c \
        "$EVD_VM_ADDR0" 2>&1)
    rc=$?
    wait "$srv"
    local src=$?
    echo "$out"
    cat /tmp/pp-server.$$
    rm -f /tmp/pp-server.$$
    [ $rc -eq 0 ] && [ $src -eq 0 ]
}
# The removal suites before this re-create the devices: wait (bounded) until
# both ports are active again.
for _ in $(seq 100); do
    [ "$(rdma link show 2>/dev/null | grep -c 'state ACTIVE')" -ge 2 ] && break
    sleep 0.2
done
ver=$(fi_info --version 2>/dev/null | awk '/^libfabric:/ {print $2}')
if out=$(FI_PROVIDER_PATH=$BUILD/.libs run_pp evd); then
    echo "ok - fi_pingpong -p evd -e msg (libfabric $ver, checked)"
else
    echo "not ok - fi_pingpong -p evd -e msg (libfabric $ver, checked)"
    rdma link show 2>&1 | sed 's/^/#   /'
    ip -br addr 2>&1 | sed 's/^/#   /'
fi
echo "$out" | sed 's/^/#   evd: /'
[ "${EVD_VERBS_BESIDE:-0}" = 1 ] || exit 0
if vout=$(run_pp verbs); then vres=passed; else vres=failed; fi
echo "# verbs (report only): fi_pingpong -p verbs -e msg $vres"
echo "$vout" | sed 's/^/#   verbs: /'
