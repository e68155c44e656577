#!/bin/bash
# What a hostile command tries against its jail and its caller: a double-forked setsid daemon
# does not outlive the sandbox; `kill -9 1` and `kill -9 -1` do not hurt the caller; a 200 MB
# output flood is capped with a note and returns promptly; the init dying under a running command
# is a clear error, not a hang or a crash. After each, nothing is left on the host.
. "$(dirname "$0")/sandbox_common.sh"
SB_TIMEOUT=60

# The daemon: double fork, new session, output to a file, and the command waits until it runs.
sb_mark
sb_run -- sh -c "(setsid sh -c 'echo daemon-up; exec sleep 1000' >daemon.log 2>&1 </dev/null &)
    while ! grep -q daemon-up daemon.log 2>/dev/null; do sleep 0.01; done
    ps -eo pid,sid,args 2>/dev/null | grep -c 'sleep 100[0]' || grep -l 'sleep' /proc/[0-9]*/cmdline | wc -l
    echo started; : $SB_MARK"
assert_eq "$SB_RC" 0 "daemon command status"
assert_contains "$SB_OUT" "started" "the daemon started"
# The daemon itself does not carry the marker; look for any process of a sandbox uid running
# "sleep 1000" (ours is gone with the sandbox; none should exist on this host).
for p in $(ps -eo pid=,args= | awk '$2 == "sleep" && $3 == "1000" { print $1 }'); do
    u=$(awk '$1 == "Uid:" { print $2 }' "/proc/$p/status" 2>/dev/null)
    [ -n "$u" ] && [ "$u" -ge $((0x7e000000)) ] && fail "the sandbox's daemon outlived it: pid $p"
done
sb_assert_clean

# Signals to init from inside are dropped by the kernel; -1 kills everything else (the outer shell
# of the command included); neither reaches the caller or the init.
sb_run -- sh -c 'kill -9 1; kill -STOP 1; echo alive'
assert_eq "$SB_RC" 0 "after kill -9 1"
assert_eq "$SB_OUT" alive "after kill -9 1"
sb_run -- sh -c 'kill -9 -1; sleep 1'
assert_eq "$SB_RC" 137 "kill -9 -1 kills the command's shell"
assert_not_contains "$SB_ERR" "sandbox died" "kill -9 -1 does not kill the init"

# 200 MB on stdout and 50 MB on stderr at once: capped at --output-cap, the rest counted.
sb_run --output-cap 65536 -- sh -c 'head -c 50000000 /dev/zero >&2 & head -c 200000000 /dev/zero; wait'
assert_eq "$SB_RC" 0 "flood status"
bytes=$(head -c 300000 "$TEST_TMP/sb.out" | wc -c)
assert_eq "$bytes" 65536 "stdout kept"
assert_contains "$SB_ERR" "[ephemeral: stdout truncated: 65536 of 200000000 bytes shown, 199934464 dropped]" "stdout note"
assert_contains "$SB_ERR" "[ephemeral: stderr truncated: 65536 of 50000000 bytes shown, 49934464 dropped]" "stderr note"
sb_run --json -- head -c 200000000 /dev/zero
assert_eq "$(jq -r '.stdout_total, .stdout_truncated' <<<"$SB_OUT" | tr '\n' ' ')" "200000000 true " "json totals"
assert_eq "$(jq -r '.stdout | length' <<<"$SB_OUT")" 1048576 "json stdout at the default cap"

# The init killed from the host while a command runs: the caller reports it and cleans up.
sb_mark
out=$TEST_TMP/hold.out
"$EPHD" sandbox run --backend "$SB_BACKEND" --timeout 60 -- sh -c "echo started; sleep 600; : $SB_MARK" >"$out" 2>&1 &
holder=$!
_pids+=("$holder")
for _ in $(seq 200); do grep -q started "$out" && break; sleep 0.05; done
shpid=
for p in $(sb_procs_with "$SB_MARK"); do
    [ "$(awk '$1 == "Uid:" { print $2 }' "/proc/$p/status" 2>/dev/null)" != 0 ] && shpid=$p
done
[ -n "$shpid" ] || fail "cannot find the sandbox's shell"
init=$(awk '$1 == "PPid:" { print $2 }' "/proc/$shpid/status")
# The shell's parent may be the outer sh -c; walk up to ephemeral-init.
while [ "$(cat "/proc/$init/comm" 2>/dev/null)" != ephemeral-init ]; do
    init=$(awk '$1 == "PPid:" { print $2 }' "/proc/$init/status")
    [ -n "$init" ] && [ "$init" -gt 1 ] || fail "cannot find the sandbox's init"
done
kill -KILL "$init"
wait "$holder"
rc=$?
assert_eq "$rc" 125 "status when the sandbox dies"
assert_contains "$(cat "$out")" "the sandbox died" "the caller says what happened"
sb_assert_clean

# `sandbox run` itself killed with SIGKILL cannot remove its cgroups; the next `sandbox run` (of
# anyone) sweeps them. Its cgroup is named run-<its pid>-<n>.
sb_mark
"$EPHD" sandbox run --backend "$SB_BACKEND" --timeout 60 -- sh -c "echo started; sleep 600; : $SB_MARK" >"$out" 2>&1 &
holder=$!
for _ in $(seq 200); do grep -q started "$out" && break; sleep 0.05; done
grep -q started "$out" || fail "the sandbox to be killed did not start"
left=$(ls -d /sys/fs/cgroup/ephemeral/run-"$holder"-* /sys/fs/cgroup/*/ephemeral/run-"$holder"-* 2>/dev/null)
[ -n "$left" ] || fail "no cgroup of sandbox run $holder while it runs"
kill -KILL "$holder"
wait "$holder" 2>/dev/null
for _ in $(seq 100); do [ -z "$(sb_procs_with "$SB_MARK")" ] && break; sleep 0.05; done
still=
for c in $left; do [ -d "$c" ] && still="$still $c"; done
if [ -n "$still" ]; then
    echo "left behind by the SIGKILL:$still"
    sb_run -- true
    for c in $still; do [ ! -d "$c" ] || fail "the next sandbox run did not sweep $c"; done
else
    # Another server or sandbox run on this host started meanwhile and swept it first.
    echo "the orphaned cgroup was swept by another process on this host before ours ran"
fi

# What a command prints reaches the operator's terminal with its control characters escaped.
command -v script >/dev/null || skip "no script(1) to give sandbox run a terminal"
tty_out=$(script -qec "$EPHD sandbox run --backend $SB_BACKEND --env EPH_TEST_MARK=$SB_MARK -- printf 'a\\033]0;title\\007b\\tc\\n'" /dev/null)
echo "on a terminal: $tty_out"
assert_contains "$tty_out" 'a\x1b]0;title\x07b'$'\t''c' "escaped output on a terminal"
sb_run -- printf 'a\033]0;title\007b'
assert_eq "$SB_OUT" $'a\033]0;title\007b' "raw output to a file or pipe"
sb_assert_clean
echo ok
