# Shared helpers for the sandbox black-box tests (sourced, not run: it is not executable).
#
#   . "$(dirname "$0")/sandbox_common.sh"
#
# Skips (exit 77) when the image is missing or the test is not root. Provides:
#   sb_run [sandbox run args...] -- CMD...   runs `ephemerald sandbox run --backend $SB_BACKEND`
#                                            (default namespaces; bounded in time) and
#                                            sets SB_RC, SB_OUT, SB_ERR; then checks that the run
#                                            left nothing behind (no cgroup, no mount, no process
#                                            carrying $SB_MARK in its command line or in its
#                                            environment: every command gets EPH_TEST_MARK)
#   sb_mark                                  a fresh unique marker in SB_MARK (each test has one
#                                            from the start; other tests run sandboxes on the same
#                                            host at the same time, so it is never a fixed word)
#   sb_procs_with MARK                       host pids whose command line or environment has MARK
#   sb_assert_clean                          the leftover checks alone
. "$(dirname "$0")/lib.sh"

if [ -z "${EPHEMERAL_IMAGE:-}" ]; then
    EPHEMERAL_IMAGE=$TOP/var/images/default
fi
export EPHEMERAL_IMAGE
[ -d "$EPHEMERAL_IMAGE" ] || skip "no sandbox image at $EPHEMERAL_IMAGE (make image)"
[ "$(id -u)" -eq 0 ] || skip "the namespaces sandbox needs root"
[ -x "$EPHD" ] || fail "no $EPHD"
SB_TIMEOUT=${SB_TIMEOUT:-120}
# These tests prove the namespaces jail's hardening item by item; other backends have their own.
SB_BACKEND=${SB_BACKEND:-namespaces}
SB_MARK=
SB_IMAGE_REAL=$(readlink -f "$EPHEMERAL_IMAGE")

sb_mark() {
    SB_MARK="ephmark$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
}
sb_mark

# Prints the host pids whose command line or environment contains $1. The marker goes to awk and
# grep through a variable and a pipe, so no process doing the search has it in its own command
# line; a process that wiped its environment and command line is still caught by the cgroup check.
sb_procs_with() {
    [ -n "$1" ] || return 0
    {
        ps -eo pid=,args= | M=$1 awk 'index($0, ENVIRON["M"]) { print $1 }'
        printf 'EPH_TEST_MARK=%s\n' "$1" | grep -lsFxzf - /proc/[0-9]*/environ | cut -d/ -f3
    } | sort -u | grep -vx -e "$$" -e "$BASHPID"
}

# Fails when a sandbox left anything on the host: a cgroup of a server that is gone (cgroups are
# named <tag>-<server pid>-<n>), a mount (every sandbox mount must live in the sandbox's own mount
# namespace, so none may ever show on the host), or a process carrying $SB_MARK.
sb_assert_clean() {
    local d c p left
    for d in /sys/fs/cgroup/ephemeral /sys/fs/cgroup/*/ephemeral; do
        [ -d "$d" ] || continue
        for c in "$d"/*-*-*; do
            [ -d "$c" ] || continue
            [[ ${c##*/} =~ ^[a-z0-9_]+-([0-9]+)-[0-9]+$ ]] || continue
            p=${BASH_REMATCH[1]}
            kill -0 "$p" 2>/dev/null || fail "cgroup left behind: $c"
        done
    done
    if grep -q -e 'ephemeral-run-' -e " $SB_IMAGE_REAL " /proc/self/mountinfo; then
        fail "sandbox mounts visible on the host: $(grep -e 'ephemeral-run-' -e " $SB_IMAGE_REAL " /proc/self/mountinfo)"
    fi
    left=$(sb_procs_with "$SB_MARK")
    [ -z "$left" ] || fail "processes outlived the sandbox: $(ps -o pid,user,args -p "$(echo $left | tr ' ' ,)")"
    return 0
}

sb_run() {
    local out=$TEST_TMP/sb.out err=$TEST_TMP/sb.err
    # SIGTERM at the bound (ephemerald then interrupts and destroys the sandbox), SIGKILL later.
    timeout -k 10 "$SB_TIMEOUT" "$EPHD" sandbox run --backend "$SB_BACKEND" \
        --env "EPH_TEST_MARK=$SB_MARK" "$@" >"$out" 2>"$err"
    SB_RC=$?
    SB_OUT=$(cat "$out")
    SB_ERR=$(cat "$err")
    [ "$SB_RC" -ne 124 ] || fail "ephemerald sandbox run did not finish within ${SB_TIMEOUT}s"
    sb_assert_clean
}

# sb_python CODE: python3 -c CODE inside a sandbox (extra sandbox args in SB_ARGS).
sb_python() {
    sb_run ${SB_ARGS:-} -- python3 -c "$1"
}
