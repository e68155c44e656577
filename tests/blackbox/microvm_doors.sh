#!/bin/bash
# The doors of doors_common.sh, closed in the microVM as in the namespaces jail (sandbox_doors.sh):
# the guest init applies the same seccomp filter and no_new_privs to itself and every command,
# sets user.max_user_namespaces to 0 in its kernel, and is the sandbox's keeper (real and saved
# uid 0, effective 1000, no capability), so that a command (uid 1000 in all three) cannot trace
# or re-limit it (the guest kernel already drops every signal its processes send to the global
# init). Under software emulation where KVM does not boot (microvm_common.sh).
. "$(dirname "$0")/microvm_common.sh"
. "$(dirname "$0")/doors_common.sh"

doors_build
vm_run --file "$TEST_TMP/probe:probe" -- sh -c "$DOORS_CMD; grep -E '^(Uid|Gid):' /proc/1/status /proc/self/status; stat -c 'file %u:%g' probe"
echo "$VM_ERR" >&2
doors_check "$(sed '/^\/proc\/\|^file /d' <<<"$VM_OUT")"
assert_eq "$VM_RC" 0 "the probe's exit status"
assert_contains "$VM_OUT" "info user.max_user_namespaces: 0" "no user namespace in the guest kernel"
assert_contains "$VM_OUT" "/proc/1/status:Uid:	0	1000	0	1000" "the init's uids"
assert_contains "$VM_OUT" "/proc/1/status:Gid:	0	1000	0	1000" "the init's gids"
assert_contains "$VM_OUT" "/proc/self/status:Uid:	1000	1000	1000	1000" "a command's uids"
assert_contains "$VM_OUT" "/proc/self/status:Gid:	1000	1000	1000	1000" "a command's gids"
assert_contains "$VM_OUT" "file 1000:1000" "a file written by the init"
echo ok
