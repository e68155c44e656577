#!/bin/bash
# The doors of doors_common.sh, closed in the namespaces jail: the same probe as gvisor_doors.sh and
# microvm_doors.sh, run here as the reference. The init is worker like the commands: the kernel
# drops the signals they send to it (a PID namespace's init), the filter refuses the rest.
. "$(dirname "$0")/sandbox_common.sh"
. "$(dirname "$0")/doors_common.sh"

doors_build
sb_run --file "$TEST_TMP/probe:probe" -- sh -c "$DOORS_CMD"
echo "$SB_ERR" >&2
doors_check "$SB_OUT"
assert_eq "$SB_RC" 0 "the probe's exit status"
assert_contains "$SB_OUT" "closed kill(init, SIGKILL): accepted, and dropped by the kernel" \
    "the jail's init: the kernel drops a command's SIGKILL"

# --keeper (what runsc and the guest kernel start it with) is refused to an init that is not
# root, before it serves: a clear message, nothing run.
command -v setpriv >/dev/null || skip "no setpriv to run the init unprivileged"
err=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$BUILD/ephemeral-init" --keeper /tmp /tmp 3</dev/null 2>&1)
assert_eq "$?" 2 "an unprivileged init with --keeper"
assert_contains "$err" "the keeper must start as root" "its message"
err=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$BUILD/ephemeral-init" --keeper /tmp 3</dev/null 2>&1)
assert_eq "$?" 2 "--keeper without its directories"
assert_contains "$err" "usage: ephemeral-init [--keeper] SCRATCH_DIR HOME_DIR" "its message"
echo ok
