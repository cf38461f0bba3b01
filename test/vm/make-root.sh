#!/usr/bin/env bash
# Creates (once, then reuses) a Debian userland for the test VM and for
# chroot builds: test/vm/make-root.sh SUITE   (trixie = Debian 13,
# bookworm = Debian 12: test/run-all.sh builds the release the host is not).
# Prints the root's path on stdout. Run as root; needs debootstrap and the
# Debian archive of this machine's apt sources. The root lives in the VM cache (outside /tmp, which the
# guest covers with tmpfs) and is rebuilt when the package list changes.
#   test/vm/make-root.sh --path SUITE        prints where that root is (made or not)
# The mirror is this machine's own: the Debian archive its apt sources name
# for its own release (EVD_DEBIAN_MIRROR=URL names another).
set -euo pipefail
print_path=
if [ "${1:-}" = --path ]; then print_path=1; shift; fi
suite=${1:?usage: make-root.sh [--path] SUITE}
case "$suite" in
trixie | bookworm) ;;
*) echo "make-root.sh: only trixie (Debian 13) and bookworm (Debian 12) are supported" >&2; exit 2 ;;
esac
[ "$(id -u)" = 0 ] || { echo "make-root.sh: run as root" >&2; exit 1; }

# What evd needs to build, test and run in that userland, and what the VM's
# guest stage uses (bash, ip, rdma, modprobe, rping, timeout, ps).
pkgs=(g++ make autoconf automake libtool pkg-config file
      libfabric-dev libfabric-bin libibverbs-dev librdmacm-dev libgtest-dev
      rdma-core ibverbs-utils rdmacm-utils iproute2 kmod procps python3
      openmpi-bin libopenmpi-dev
      valgrind strace)  # the count gate (test/gate/op-count.sh)
cache=${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/evd-vm
root=$cache/$suite-root
if [ -n "$print_path" ]; then
    echo "$root"
    exit 0
fi
# The archive apt uses here for this machine's own release (not its
# -updates or -security suites): the other release is on the same archive.
own_mirror() {
    local codename
    codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
    [ -n "$codename" ] || return 1
    # the Debian archive whose release file names this machine's release
    # (sources may say bookworm or oldstable alike)
    apt-get indextargets --format '$(ORIGIN) $(CODENAME) $(REPO_URI)' 2>/dev/null |
        awk -v c="$codename" '$1 == "Debian" && $2 == c { print $3; exit }'
}
mirror=${EVD_DEBIAN_MIRROR:-$(own_mirror || true)}
stamp=$root/.evd-root-stamp
want=$(printf '%s\n' "$suite" "${pkgs[@]}" | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "$root"
    exit 0
fi

if ! command -v debootstrap >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >&2
fi
[ -n "$mirror" ] || { echo "make-root.sh: this machine's apt sources name no archive for its release; set EVD_DEBIAN_MIRROR" >&2; exit 1; }
mkdir -p "$cache"
tmp=$root.tmp
rm -rf "$tmp"
include=$(IFS=,; echo "${pkgs[*]}")
echo "make-root.sh: debootstrap $suite into $root (a few minutes)" >&2
debootstrap --variant=minbase --include="$include" "$suite" "$tmp" "$mirror" >"$cache/$suite-debootstrap.log" 2>&1 ||
    { echo "make-root.sh: debootstrap failed, see $cache/$suite-debootstrap.log" >&2; tail -5 "$cache/$suite-debootstrap.log" >&2; exit 1; }
# The guest binds its own /etc/hosts over this one.
[ -e "$tmp/etc/hosts" ] || echo "127.0.0.1 localhost" >"$tmp/etc/hosts"
rm -rf "$root"
mv "$tmp" "$root"
echo "$want" >"$stamp"
echo "$root"
