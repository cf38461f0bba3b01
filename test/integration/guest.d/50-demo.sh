#!/usr/bin/env bash
# The main job's demo as a test: every stage must show up as an EQ record.
# It deletes rxe1; the device is re-created afterwards for anything that follows.
set -u
out=$(FI_PROVIDER=evd timeout 300 "$BUILD/evd_demo" 2>&1)
rc=$?
expect() {  # expect NAME REGEX
    if grep -qE "$2" <<<"$out"; then echo "ok - demo: $1"; else echo "not ok - demo: $1"; fi
}
if [ $rc -eq 0 ] && grep -q "^done in" <<<"$out"; then echo "ok - demo: exits 0"; else echo "not ok - demo: exits 0 (exit $rc)"; fi
expect "FI_CONNREQ with the client's data" 'server-eq FI_CONNREQ .*"hello from the client"'
expect "FI_CONNECTED on both sides" 'client-eq FI_CONNECTED .*"welcome"'
expect "data checked" '1000 sends of 4096 B received and checked'
expect "RDMA write checked" '1 MiB RDMA write landed and checked'
expect "link down is PORT_ERR on the domain" 'server-eq ERROR +fid=domain:rxe0 .*IBV_EVENT_PORT_ERR'
expect "link up is an opt-in FI_NOTIFY PORT_ACTIVE" 'server-eq FI_NOTIFY +fid=domain:rxe0 .*\(port active, port 1\)'
expect "device removal ends the client endpoint (FI_ENODEV)" 'client-eq ERROR +fid=client-ep .*err=No such device'
expect "the server sees FI_SHUTDOWN" 'server-eq FI_SHUTDOWN +fid=server-ep'
expect "the kernel finishes the removal" 'device removal completed'
echo "$out" | sed 's/^/#   /'
if ! rdma link show 2>/dev/null | grep -q "link $EVD_VM_DEV1/"; then
    rdma link add "$EVD_VM_DEV1" type rxe netdev "$EVD_VM_NETDEV1" 2>/dev/null || true
fi
