#!/bin/bash
# The seccomp filter, call by call, from inside a real sandbox as worker (sandbox_probe.c, built
# static here and copied in). Each probe passes arguments for which the kernel itself would answer
# something other than EPERM (EFAULT, EBADF, EINVAL, ENOTTY, success): so EPERM proves the filter
# refused the call before the kernel saw it, and the test fails if a filter rule is missing (run
# as an unprivileged user outside a sandbox, every probe fails). Then the allowed neighbours still
# work, and system calls of other architectures (i386 int 0x80, x32) kill the process.
. "$(dirname "$0")/sandbox_common.sh"

command -v cc >/dev/null || skip "no C compiler to build the probe"
cc -static -O2 -o "$TEST_TMP/probe" "$(dirname "$0")/sandbox_probe.c" || fail "cannot build the probe"
sb_run --file "$TEST_TMP/probe:probe" -- ./probe
echo "$SB_OUT"
echo "$SB_ERR" >&2
assert_eq "$SB_RC" 0 "probe exit status"
assert_contains "$SB_OUT" "bad=0" "every probe as expected"

# The unshare tool the image ships, as an agent would try it.
sb_run -- unshare -U true
[ "$SB_RC" -ne 0 ] || fail "unshare -U succeeded"
assert_contains "$SB_ERR" "Operation not permitted" "unshare -U"
sb_run -- unshare -r -n true
[ "$SB_RC" -ne 0 ] || fail "unshare -r -n succeeded"
echo ok
