#!/usr/bin/env bash
# Builds man/fi_evd.7 from man/parts/*.7 (head, getinfo, eq, cm, datapath, atomic, dgram, async, others, tail). With --check, fails
# when the committed page differs from what the parts give (so it cannot go stale).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp)
order="00-head getinfo eq cm datapath atomic dgram async"
{
    for p in $order; do [ -f "$here/parts/$p.7" ] && cat "$here/parts/$p.7"; done
    for f in "$here"/parts/*.7; do
        b=$(basename "$f" .7)
        case " $order 99-tail " in *" $b "*) ;; *) cat "$f" ;; esac
    done
    cat "$here/parts/99-tail.7"
} >"$tmp"
if [ "${1:-}" = "--check" ]; then
    if cmp -s "$tmp" "$here/fi_evd.7"; then
        echo "ok - man/fi_evd.7 matches man/parts"
        rm -f "$tmp"
    else
        echo "not ok - man/fi_evd.7 is stale: run man/assemble.sh"
        rm -f "$tmp"
        exit 1
    fi
else
    mv "$tmp" "$here/fi_evd.7"
fi
