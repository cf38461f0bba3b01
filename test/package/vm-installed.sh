#!/usr/bin/env bash
# evd as its users get it: installs the .debs in DEBDIR into the VM's
# userland (the host's, or the Debian root ROOT made by make-root.sh), boots
# the Soft-RoCE VM on it with no FI_PROVIDER_PATH, and checks there that stock
# fi_info finds evd on rxe0 and rxe1 and that Open MPI passes its checked
# ping-pong and allreduce over "evd;ofi_rxm" (test/mpi/run-mpi.sh). Purges
# the packages afterwards. Run as root:
#   bash test/package/vm-installed.sh DEBDIR [ROOT]
# Prints ok/not ok lines; exits 0 only when all passed.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
debdir=$(cd "${1:?usage: vm-installed.sh DEBDIR [ROOT]}" && pwd)
root=${2:-}
pkgs=(libfabric-evd libfabric-evd-dev)
export DEBIAN_FRONTEND=noninteractive
in_userland() {  # runs a command where the packages go
    if [ -n "$root" ]; then bash "$top/test/vm/in-root.sh" "$root" "$top" "$@"; else "$@"; fi
}
where=${root:+the Debian root}
where=${where:-this machine}
ls "$debdir"/libfabric-evd_*.deb "$debdir"/libfabric-evd-dev_*.deb >/dev/null 2>&1 ||
    { echo "not ok - packages: no libfabric-evd .debs in $debdir"; exit 1; }
if ! in_userland dpkg -i "$debdir"/libfabric-evd_*.deb "$debdir"/libfabric-evd-dev_*.deb >/tmp/vm-installed.$$ 2>&1; then
    echo "not ok - packages: dpkg -i on $where"
    sed 's/^/#   /' /tmp/vm-installed.$$
    in_userland dpkg --purge "${pkgs[@]}" >/dev/null 2>&1
    rm -f /tmp/vm-installed.$$
    exit 1
fi
rm -f /tmp/vm-installed.$$
echo "# packages installed on $where"
rc=0
env -u FI_PROVIDER_PATH EVD_VM_TIMEOUT=900 "$top/test/vm/run-in-vm" ${root:+--root "$root"} -- bash -c '
    unset FI_PROVIDER_PATH
    ver=$(fi_info --version | awk "/^libfabric:/ {print \$2}")
    out=$(fi_info -p evd 2>&1)
    if grep -q "domain: $EVD_VM_DEV0" <<<"$out" && grep -q "domain: $EVD_VM_DEV1" <<<"$out"; then
        echo "ok - installed package: fi_info -p evd lists $EVD_VM_DEV0 and $EVD_VM_DEV1 (libfabric $ver, no FI_PROVIDER_PATH)"
    else
        echo "not ok - installed package: fi_info -p evd lists $EVD_VM_DEV0 and $EVD_VM_DEV1 (libfabric $ver)"
        echo "$out" | tail -5 | sed "s/^/#   /"
    fi
    bash "$0/test/mpi/run-mpi.sh" "evd;ofi_rxm" | sed "s/^ok - mpi: /ok - installed package: mpi: /; s/^not ok - mpi: /not ok - installed package: mpi: /"
' "$top" || rc=1
if in_userland dpkg --purge "${pkgs[@]}" >/dev/null 2>&1; then
    echo "ok - packages purged from $where"
else
    echo "not ok - packages purged from $where"
    rc=1
fi
exit $rc
