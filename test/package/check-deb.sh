#!/usr/bin/env bash
# Checks evd's Debian packaging (debian/) end to end, as root on Debian 12 or
# 13: installs what the package build needs (only what is missing), copies the
# tree (git-tracked files plus untracked, non-ignored ones) to a temporary
# directory, builds there with `dpkg-buildpackage -us -uc -b` (dh runs
# autoreconf; no tests run), installs libfabric-evd and libfabric-evd-dev,
# checks them, then purges them, leaving the machine's package set as it was.
# Prints one "ok - NAME" / "not ok - NAME" line per check (diagnostics on
# "#" lines); exits 0 only when every check is ok.
#
#   bash test/package/check-deb.sh
#   EVD_DEB_OUT=DIR bash test/package/check-deb.sh    also keep the .debs in DIR
#
# Build dependencies it installs stay installed (like test/install-deps.sh).
# A file of the packages that already exists on the machine without belonging
# to a package (a `make install` of the plugin) is moved aside while the
# packages are installed and put back afterwards.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
pkgs=(libfabric-evd libfabric-evd-dev)
jobs=$(nproc 2>/dev/null || echo 2)
export DEBIAN_FRONTEND=noninteractive
unset FI_PROVIDER_PATH PKG_CONFIG_PATH

fails=0
tmp=
debs_installed=0
apt_updated=0

ok() { echo "ok - $1"; }
not_ok() {
    echo "not ok - $1"
    fails=$((fails + 1))
    if [ -n "${2:-}" ] && [ -s "$2" ]; then
        tail -n 30 "$2" | sed 's/^/#   /'
    fi
}
# check NAME CMD...: one check; CMD's output goes to a log shown on failure.
check() {
    local name=$1 log
    shift
    log=$(mktemp "$tmp/log.XXXXXX")
    if "$@" >"$log" 2>&1 </dev/null; then ok "$name"; return 0; fi
    not_ok "$name" "$log"
    return 1
}
skip() { not_ok "$1 # skipped: $2"; }

installed_set() {
    dpkg-query -W -f='${db:Status-Status} ${binary:Package}\n' 2>/dev/null |
        awk '$1 == "installed" { print $2 }' | sort
}
is_installed() {
    dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null | grep -qx installed
}
apt_update_once() {
    [ "$apt_updated" = 1 ] && return 0
    apt-get update -qq && apt_updated=1
}

# ---------------------------------------------------------------- cleanup
# Purges the packages if a check left them installed, purges what their
# installation pulled in, puts moved-aside files back, removes the temp dir.
cleanup() {
    if [ "$debs_installed" = 1 ]; then
        apt-get purge -y -qq "${pkgs[@]}" >/dev/null 2>&1
        debs_installed=0
    fi
    if [ -n "$tmp" ] && [ -f "$tmp/before" ]; then
        local extra
        extra=$(comm -13 "$tmp/before" <(installed_set))
        # shellcheck disable=SC2086
        [ -n "$extra" ] && apt-get purge -y -qq $extra >/dev/null 2>&1
    fi
    if [ -n "$tmp" ] && [ -d "$tmp/aside" ]; then
        (cd "$tmp/aside" && find . -type f -o -type l) | while read -r f; do
            mkdir -p "$(dirname "${f#.}")"
            mv -f "$tmp/aside/$f" "${f#.}"
        done
    fi
    [ -n "$tmp" ] && rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- preconditions
if [ "$(id -u)" -ne 0 ] || [ ! -f /etc/debian_version ]; then
    echo "not ok - preconditions # run as root on Debian 12 or 13"
    exit 1
fi
for p in "${pkgs[@]}"; do
    if is_installed "$p"; then
        echo "not ok - preconditions # $p is already installed; this check would purge it (apt-get purge ${pkgs[*]})"
        exit 1
    fi
done
tmp=$(mktemp -d /tmp/evd-check-deb.XXXXXX)
chmod 755 "$tmp"   # apt reads the local .debs as user _apt
src=$tmp/evd

# ---------------------------------------------------------------- 1. build deps
# Tools of the check itself, then the Build-Depends of debian/control (asked
# from apt only when dpkg-checkbuilddeps finds something missing).
install_build_deps() {
    local want=(dpkg-dev build-essential libfabric-bin) missing=() p
    [ -e "$top/.git" ] && want+=(git)
    for p in "${want[@]}"; do is_installed "$p" || missing+=("$p"); done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "installing ${missing[*]}"
        apt_update_once && apt-get install -y -qq --no-install-recommends "${missing[@]}" || return 1
    fi
    mkdir -p "$src"
    if [ -e "$top/.git" ]; then
        (cd "$top" && git -c safe.directory="$top" ls-files -z --cached --others --exclude-standard |
            tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -C "$src" -xf - || return 1
    else
        (cd "$top" && tar --exclude=./.git --exclude='./build*' --exclude=./test-results -cf - .) |
            tar -C "$src" -xf - || return 1
    fi
    [ -f "$src/debian/control" ] || { echo "no debian/control in the copy"; return 1; }
    if ! (cd "$src" && dpkg-checkbuilddeps); then
        apt_update_once && apt-get build-dep -y -qq --no-install-recommends "$src" || return 1
        (cd "$src" && dpkg-checkbuilddeps) || return 1
    fi
}
check "build dependencies installed" install_build_deps
deps_ok=$?

# ---------------------------------------------------------------- 2. build
build() {
    (cd "$src" &&
        DEB_BUILD_OPTIONS="nocheck parallel=$jobs ${DEB_BUILD_OPTIONS:-}" \
            timeout 1200 dpkg-buildpackage -us -uc -b) &&
        ls "$tmp"/libfabric-evd_*.deb "$tmp"/libfabric-evd-dev_*.deb
}
built=1
if [ $deps_ok -eq 0 ]; then
    t0=$SECONDS
    check "dpkg-buildpackage -us -uc -b builds libfabric-evd and libfabric-evd-dev" build && built=0
    echo "# package build: $((SECONDS - t0)) s"
else
    skip "dpkg-buildpackage -us -uc -b builds libfabric-evd and libfabric-evd-dev" "no build dependencies"
fi
if [ -n "${EVD_DEB_OUT:-}" ] && [ $built -eq 0 ]; then
    mkdir -p "$EVD_DEB_OUT" && cp "$tmp"/*.deb "$EVD_DEB_OUT"/
fi

# ---------------------------------------------------------------- 3. install
install_debs() {
    installed_set >"$tmp/before"
    # move aside files the packages ship that exist without belonging to a
    # package (a `make install`): dpkg would overwrite them, the purge remove them
    local deb f
    for deb in "$tmp"/libfabric-evd_*.deb "$tmp"/libfabric-evd-dev_*.deb; do
        dpkg-deb --fsys-tarfile "$deb" | tar -t | sed -n 's|^\./|/|p' | while read -r f; do
            if [ -f "$f" ] || [ -L "$f" ]; then
                if ! dpkg -S "$f" >/dev/null 2>&1; then
                    echo "moving aside $f (belongs to no package)"
                    mkdir -p "$tmp/aside$(dirname "$f")" && mv -f "$f" "$tmp/aside$f"
                fi
            fi
        done
    done
    debs_installed=1
    apt-get install -y -q --no-install-recommends \
        "$tmp"/libfabric-evd_*.deb "$tmp"/libfabric-evd-dev_*.deb &&
        is_installed libfabric-evd && is_installed libfabric-evd-dev
}
inst=1
if [ $built -eq 0 ]; then
    check "apt-get install ./libfabric-evd*.deb" install_debs && inst=0
else
    skip "apt-get install ./libfabric-evd*.deb" "no packages built"
fi

# ---------------------------------------------------------------- 4-9. installed packages
owned_by() {   # owned_by PACKAGE FILE
    [ -e "$2" ] || { echo "$2: missing"; return 1; }
    dpkg -S "$2" | grep -Eq "^$1(:[a-z0-9]+)?: " || { echo "$2 is not from $1"; dpkg -S "$2"; return 1; }
}
plugin_in_provider_dir() {
    local dir
    dir=$(pkg-config --variable=libdir libfabric)/libfabric
    echo "libfabric's provider directory: $dir"
    owned_by libfabric-evd "$dir/libevd-fi.so" || return 1
    if dpkg -L libfabric-evd | grep '\.la$'; then echo "a libtool archive is packaged"; return 1; fi
}
fi_info_lists_evd() {
    env -u FI_PROVIDER_PATH fi_info -l >"$tmp/fi_info.out" 2>&1
    cat "$tmp/fi_info.out"
    grep -q '^evd:' "$tmp/fi_info.out"
}
eqwatch_installed() {
    owned_by libfabric-evd /usr/bin/evd_eqwatch && [ -x /usr/bin/evd_eqwatch ]
}
pkg_config_works() {
    pkg-config --print-errors --cflags fabric-evd || return 1
    pkg-config --print-errors --libs fabric-evd || return 1
    owned_by libfabric-evd-dev "$(pkg-config --variable=pcfiledir fabric-evd)/fabric-evd.pc" || return 1
    local pd
    pd=$(pkg-config --variable=plugindir fabric-evd)
    [ "$pd" = "$(pkg-config --variable=libdir libfabric)/libfabric" ] ||
        { echo "plugindir=$pd is not libfabric's provider directory"; return 1; }
}
c_program_compiles() {
    owned_by libfabric-evd-dev /usr/include/rdma/fi_ext_evd.h || return 1
    cat >"$tmp/t.c" <<'EOF'
#include <rdma/fi_ext_evd.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
	struct fi_evd_eq_ops ops;
	memset(&ops, 0, sizeof ops);
	ops.size = sizeof ops;
	printf("%s %zu libfabric %u.%u\n", FI_EVD_EQ_OPS_V1, ops.size,
	       FI_MAJOR(fi_version()), FI_MINOR(fi_version()));
	return 0;
}
EOF
    # shellcheck disable=SC2046
    cc -Wall -Werror -o "$tmp/t" "$tmp/t.c" $(pkg-config --cflags fabric-evd) \
        $(pkg-config --libs fabric-evd) && "$tmp/t"
}
man_page_installed() {
    local page=/usr/share/man/man7/fi_evd.7.gz
    if [ ! -e "$page" ] && grep -qs '^path-exclude=*/usr/share/man/' /etc/dpkg/dpkg.cfg.d/*; then
        # dpkg is told not to install manual pages here: check the package has it
        echo "dpkg excludes /usr/share/man on this machine: checking the package contents"
        dpkg-deb -c "$tmp"/libfabric-evd_*.deb | grep -q " \./usr/share/man/man7/fi_evd\.7\.gz$"
        return
    fi
    owned_by libfabric-evd "$page" || return 1
    if command -v man >/dev/null; then man -w fi_evd; fi
}
names=("plugin libevd-fi.so from libfabric-evd in libfabric's provider directory, no .la"
       "fi_info -l lists evd: with no FI_PROVIDER_PATH"
       "evd_eqwatch installed in /usr/bin"
       "pkg-config --cflags fabric-evd works (Requires: libfabric, plugindir)"
       "a C program including <rdma/fi_ext_evd.h> compiles with pkg-config fabric-evd"
       "man page fi_evd(7) installed")
fns=(plugin_in_provider_dir fi_info_lists_evd eqwatch_installed pkg_config_works
     c_program_compiles man_page_installed)
for i in "${!names[@]}"; do
    if [ $inst -eq 0 ]; then
        check "${names[$i]}" "${fns[$i]}"
    else
        skip "${names[$i]}" "packages not installed"
    fi
done

# ---------------------------------------------------------------- 10. purge
purge() {
    apt-get purge -y -q "${pkgs[@]}" || return 1
    debs_installed=0
    local p extra
    for p in "${pkgs[@]}"; do
        if is_installed "$p"; then echo "$p still installed"; return 1; fi
    done
    extra=$(comm -13 "$tmp/before" <(installed_set))
    if [ -n "$extra" ]; then
        echo "purging what the packages pulled in: $extra"
        # shellcheck disable=SC2086
        apt-get purge -y -q $extra || return 1
    fi
    if ! diff "$tmp/before" <(installed_set); then
        echo "the installed package set differs from before the check"
        return 1
    fi
    if [ -e "$(pkg-config --variable=libdir libfabric)/libfabric/libevd-fi.so" ] && [ ! -d "$tmp/aside" ]; then
        echo "libevd-fi.so is still in libfabric's provider directory"
        return 1
    fi
}
if [ $inst -eq 0 ] || [ "$debs_installed" = 1 ]; then
    check "apt-get purge leaves the installed package set as it was" purge
else
    skip "apt-get purge leaves the installed package set as it was" "packages not installed"
fi

[ $fails -eq 0 ]
