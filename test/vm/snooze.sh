# shellcheck shell=bash
# Sourced by the scripts that poll inside the test VMs: `snooze SECS` waits
# like `sleep SECS` without starting a process. Under qemu's TCG every
# process start costs milliseconds of emulated CPU: a loop of `sleep 0.1`
# keeps half of a host core busy (measured: 20 CPU-s in 40 s, against 0 with
# snooze), and the multi-node beds run several such loops on every node for
# their whole life. bash's `read -t` on a pipe that only this shell holds
# (so nothing ever arrives) times out instead. The first call opens that
# pipe through a process substitution, which sets $!: take $! right after
# the `&` it belongs to.
snooze() {
    if [ -z "${_snooze_fd:-}" ]; then
        exec {_snooze_fd}<> <(:)
    fi
    read -r -t "$1" -u "$_snooze_fd" _ || :
}
