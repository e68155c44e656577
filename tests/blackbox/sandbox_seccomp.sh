#!/bin/bash
# The seccomp filter, call by call, from inside a real sandbox as worker (sandbox_probe.c, built
# static here and copied in). Each probe passes arguments for which the kernel itself would answer
# something other than EPERM (EFAULT, EBADF, EINVAL, ENOTTY, success): so EPERM proves the filter
# refused the call before the kernel saw it, and the test fails if a filter rule is missing (run
# as an unprivileged user outside a sandbox, every probe fails). Then the allowed neighbours still
# work. System calls of other architectures (i386 int 0x80, x32): what the kernel does with them
# depends on how it was built (without 32-bit emulation, int 0x80 is a SIGSEGV before any filter
# runs), so the probe first runs on the bare host, and the sandbox must be at least as strict:
# SIGSYS where the host let the call reach the kernel, SIGSYS or the host's own signal otherwise.
. "$(dirname "$0")/sandbox_common.sh"

command -v cc >/dev/null || skip "no C compiler to build the probe"
cc -static -O2 -o "$TEST_TMP/probe" "$(dirname "$0")/sandbox_probe.c" || fail "cannot build the probe"
host=$("$TEST_TMP/probe" foreign) || fail "the probe failed on the host"
echo "bare host: $host"
sb_run --file "$TEST_TMP/probe:probe" -- ./probe
echo "$SB_OUT"
echo "$SB_ERR" >&2
assert_eq "$SB_RC" 0 "probe exit status"
assert_contains "$SB_OUT" "bad=0" "every probe as expected"
for arch in i386 x32; do
    h=$(awk -v a="$arch" '$1 == "foreign" && $2 == a { print $3, $4 }' <<<"$host")
    s=$(awk -v a="$arch" '$1 == "foreign" && $2 == a { print $3, $4 }' <<<"$SB_OUT")
    [ -n "$h" ] && [ -n "$s" ] || fail "no outcome for $arch (host '$h', sandbox '$s')"
    if [ "$h" = "exit 0" ]; then
        echo "$arch: the host kernel runs these calls; in the sandbox: $s (must be signal 31)"
        assert_eq "$s" "signal 31" "$arch system call in the sandbox"
    else
        echo "$arch: the host kernel itself refuses these calls ($h); in the sandbox: $s"
        [ "$s" = "signal 31" ] || [ "$s" = "$h" ] || fail "$arch in the sandbox: $s (host: $h)"
    fi
done

# The unshare tool the image ships, as an agent would try it.
sb_run -- unshare -U true
[ "$SB_RC" -ne 0 ] || fail "unshare -U succeeded"
assert_contains "$SB_ERR" "unshare failed: Operation not permitted" "unshare -U"
sb_run -- unshare -r -n true
[ "$SB_RC" -ne 0 ] || fail "unshare -r -n succeeded"
# The right reason: the filter's EPERM on unshare itself (not, say, a missing program or a map
# write that failed after the namespaces were made).
assert_contains "$SB_ERR" "unshare failed: Operation not permitted" "unshare -r -n"
echo ok
