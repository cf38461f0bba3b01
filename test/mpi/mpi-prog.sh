# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# Sourced by the MPI test scripts. mpi_prog NAME OUT LOG: OUT becomes the
# MPI test program NAME (test/mpi/NAME.c): the one `make mpi-programs` built
# in the same userland ($EVD_MPI_PREBUILT/NAME, used when it is newer than
# its source), or compiled here with mpicc (its messages in LOG). Under TCG
# one mpicc takes about 7 CPU-seconds in the guest; the copy, a tenth of one.
mpi_prog() {
    local name=$1 out=$2 log=$3
    local src
    src="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$name.c"
    local pre=${EVD_MPI_PREBUILT:+$EVD_MPI_PREBUILT/$name}
    if [ -n "$pre" ] && [ -x "$pre" ] && [ "$pre" -nt "$src" ]; then
        cp "$pre" "$out" 2>"$log" && return 0
    fi
    mpicc -O2 -Wall -Wextra -o "$out" "$src" >"$log" 2>&1
}
