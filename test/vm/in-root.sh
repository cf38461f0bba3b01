#!/usr/bin/env bash
# test/vm/in-root.sh ROOT DIR CMD...: runs CMD as root chrooted into ROOT (a
# userland made by make-root.sh), in DIR, with DIR's git top level (or DIR)
# visible at the same path and /proc, /dev, /tmp provided. Every mount is made
# in a private mount namespace, so nothing is left behind on the host.
set -euo pipefail
root=$(cd "${1:?usage: in-root.sh ROOT DIR CMD...}" && pwd -P)
dir=$(cd "${2:?usage: in-root.sh ROOT DIR CMD...}" && pwd -P)
shift 2
[ $# -gt 0 ] || { echo "in-root.sh: no command" >&2; exit 2; }
share=$(git -C "$dir" rev-parse --show-toplevel 2>/dev/null || echo "$dir")
mkdir -p "$root$share" "$root/proc" "$root/dev" "$root/tmp"
exec unshare --mount --propagation private -- bash -c '
    set -e
    root=$1 share=$2 dir=$3
    shift 3
    # /tmp first: a work tree below /tmp must be mounted over it, not hidden
    mount -t tmpfs tmpfs "$root/tmp"
    mkdir -p "$root$share"
    mount --bind "$share" "$root$share"
    mount -t proc proc "$root/proc"
    mount --rbind /dev "$root/dev"
    exec chroot "$root" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
        HOME=/root LANG=C.UTF-8 ${ASAN_OPTIONS:+ASAN_OPTIONS=$ASAN_OPTIONS} \
        bash -c "cd \"\$0\" && exec \"\$@\"" "$dir" "$@"
' _ "$root" "$share" "$dir" "$@"
