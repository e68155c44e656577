#!/bin/bash
# The doors of doors_common.sh, closed under gvisor as in the namespaces jail (sandbox_doors.sh):
# the init applies the same seccomp filter and no_new_privs to itself and every command, and is
# the sandbox's keeper (real and saved uid 0, effective 1000, no capability), so that a command
# (uid 1000 in all three) cannot signal, stop, trace or re-limit it; gVisor does not protect a
# namespace's init by itself. One difference is allowed, written down in docs/SECURITY.md:
# gVisor answers personality(0xffffffff) with EINVAL on its own.
. "$(dirname "$0")/gvisor_common.sh"
. "$(dirname "$0")/doors_common.sh"

doors_build
gv_run --file "$TEST_TMP/probe:probe" -- sh -c "$DOORS_CMD"
echo "$GV_ERR" >&2
doors_check "$GV_OUT" '^FAIL allowed personality\(query\)$'
assert_eq "$GV_RC" 0 "the probe's exit status"
assert_contains "$GV_OUT" "info user.max_user_namespaces: absent" "gVisor has no such sysctl"

# How: the init's ids and the command's, and a file the init wrote for the host is worker's.
gv_run --file "$TEST_TMP/probe:probe" -- sh -c 'grep -E "^(Uid|Gid):" /proc/1/status /proc/self/status; stat -c "file %u:%g" probe'
assert_eq "$GV_RC" 0 "exit status ($GV_ERR)"
echo "$GV_OUT"
assert_contains "$GV_OUT" "/proc/1/status:Uid:	0	1000	0	1000" "the init's uids"
assert_contains "$GV_OUT" "/proc/1/status:Gid:	0	1000	0	1000" "the init's gids"
assert_contains "$GV_OUT" "/proc/self/status:Uid:	1000	1000	1000	1000" "a command's uids"
assert_contains "$GV_OUT" "/proc/self/status:Gid:	1000	1000	1000	1000" "a command's gids"
assert_contains "$GV_OUT" "file 1000:1000" "a file written by the init"
echo ok
