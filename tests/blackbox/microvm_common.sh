# Shared helpers for the microvm backend's black-box tests (sourced, not run: it is not executable).
#
#   . "$(dirname "$0")/microvm_common.sh"
#
# The tests run under software emulation (TCG), explicitly allowed: EPHEMERAL_MICROVM_ALLOW_TCG=1
# with --backend microvm. On a host whose KVM boots guests the backend uses KVM instead. Skips
# (exit 77, with the reason) when the test is not root, the image or its microvm kernel and disk
# are missing (make image), or QEMU is not installed. Provides:
#   vm_run [sandbox run args...] -- CMD...   `ephemerald sandbox run --backend microvm` (bounded in
#                                            time); sets VM_RC, VM_OUT, VM_ERR; then vm_assert_clean
#   vm_assert_clean                          fails when any microVM of a process that is no longer
#                                            running left something: a QEMU process, a cgroup
. "$(dirname "$0")/lib.sh"

: "${EPHEMERAL_IMAGE:=$TOP/var/images/default}"
export EPHEMERAL_IMAGE EPHEMERAL_MICROVM_ALLOW_TCG=1
[ "$(id -u)" -eq 0 ] || skip "the microvm backend needs root"
[ -d "$EPHEMERAL_IMAGE" ] || skip "no sandbox image at $EPHEMERAL_IMAGE (make image)"
[ -x "$EPHD" ] || fail "no $EPHD"
command -v qemu-system-x86_64 >/dev/null 2>&1 || skip "qemu-system-x86_64 is not installed (Debian package qemu-system-x86)"
VM_DISK=$(dirname "$(readlink -f "$EPHEMERAL_IMAGE")")/microvm
[ -f "$VM_DISK/complete" ] || skip "no microvm kernel and root disk in $VM_DISK (make image builds them)"
VM_TIMEOUT=${VM_TIMEOUT:-150}

# MicroVMs are named <tag>-<pid>-vm<n> after the process that made them (cgroup, and QEMU's
# -name ephemeral-<name>): whatever carries the name of a process that is gone is a leak.
_vm_owner_dead() { # name
    local p=${1#*-}
    p=${p%%-*}
    [[ $p =~ ^[0-9]+$ ]] || return 1
    ! kill -0 "$p" 2>/dev/null
}

vm_assert_clean() {
    local c n pid args
    for c in /sys/fs/cgroup/*/ephemeral/*-vm* /sys/fs/cgroup/ephemeral/*-vm*; do
        [ -d "$c" ] || continue
        n=${c##*/}
        ! _vm_owner_dead "$n" || fail "microVM cgroup left behind: $c"
    done
    while read -r pid args; do
        n=${args#*-name ephemeral-}
        n=${n%% *}
        ! _vm_owner_dead "$n" || fail "QEMU outlived its microVM: $pid $args"
    done < <(ps -eo pid=,args= | awk '/qemu-system-x86_64 -name ephemeral-/ && !/awk/')
    return 0
}

vm_run() {
    local out=$TEST_TMP/vm.out err=$TEST_TMP/vm.err
    # SIGTERM at the bound (ephemerald then interrupts and destroys the VM), SIGKILL later.
    timeout -k 10 "$VM_TIMEOUT" "$EPHD" sandbox run --backend microvm "$@" >"$out" 2>"$err"
    VM_RC=$?
    VM_OUT=$(cat "$out")
    VM_ERR=$(cat "$err")
    [ "$VM_RC" -ne 124 ] || fail "ephemerald sandbox run did not finish within ${VM_TIMEOUT}s"
    vm_assert_clean
}
