#!/bin/bash
# Resource limits: a fork bomb stops below pids.max and the sandbox still answers; a memory bomb
# is killed at the memory limit; a disk fill stops at the scratch tmpfs size; a command past its
# --timeout is killed (timed-out flag, 128+9) and the call returns.
. "$(dirname "$0")/sandbox_common.sh"
SB_TIMEOUT=60

# Fork bomb, counted: children that wait forever, until fork fails. With --pids 64 the count
# stays under 64 (the per-user rlimit backstop sits above it, at pids + 16: a count between the
# two means pids.max is missing). Then the same command goes on and prints.
sb_run --pids 64 --timeout 20 -- python3 -c '
import os, signal
n = 0
try:
    while n < 1000:
        pid = os.fork()
        if pid == 0:
            signal.pause()
            os._exit(0)
        n += 1
except OSError as e:
    print("fork failed:", e.strerror)
print("forked", n)
print("still-alive")
'
echo "$SB_OUT"
assert_eq "$SB_RC" 0 "fork bomb exit status"
assert_contains "$SB_OUT" "fork failed" "fork failed at the limit"
n=$(awk '$1 == "forked" { print $2 }' <<<"$SB_OUT")
[ -n "$n" ] && [ "$n" -gt 10 ] && [ "$n" -lt 64 ] || fail "forked $n processes under --pids 64"
assert_contains "$SB_OUT" "still-alive" "the sandbox answers after the bomb"

# A bomb that never gives up (every process forks again and again, retrying when refused), in
# the foreground: the timeout kills its whole process group and the call returns, timed out.
sb_run --pids 64 --timeout 3 --json -- python3 -c '
import os, time
while True:
    try:
        os.fork()
    except OSError:
        time.sleep(0.001)
'
assert_eq "$(jq -r .timed_out <<<"$SB_OUT")" true "the endless fork bomb timed out"
assert_eq "$SB_RC" 137 "endless fork bomb status"
# The shell one backgrounds itself: the command ends at once (or its shell dies of "Cannot fork":
# dash gives up), and the bomb dies with the sandbox; sb_run checks nothing is left.
sb_run --pids 64 --timeout 3 -- sh -c 'b() { b | b & }; b'
[ "$SB_RC" -lt 125 ] || fail "background fork bomb: status $SB_RC: $SB_ERR"

# Memory bomb: 16 MiB at a time, each touched, up to 1 GiB; killed at --memory-mib 64.
sb_run --memory-mib 64 --json -- python3 -c '
import sys
chunks = []
for i in range(64):
    chunks.append(bytearray(16 << 20))
    print((i + 1) * 16, flush=True)
print("survived")
'
echo "$SB_OUT"
assert_not_contains "$(jq -r .stdout <<<"$SB_OUT")" "survived" "the memory bomb"
assert_eq "$(jq -r .timed_out <<<"$SB_OUT")" false "memory bomb: not the timeout"
assert_eq "$SB_RC" 137 "memory bomb killed by SIGKILL"
last=$(jq -r .stdout <<<"$SB_OUT" | tail -n 1)
[ "${last:-0}" -lt 64 ] || fail "the memory bomb got $last MiB under a 64 MiB limit"

# Disk fill: five 8 MiB files (each under the per-file limit) into a 16 MiB scratch tmpfs.
sb_run --disk-mib 16 -- sh -c 'for i in 1 2 3 4 5; do dd if=/dev/zero of=big$i bs=1M count=8 2>&1; done
    echo total $(cat big* | wc -c); echo answered'
echo "$SB_OUT"
assert_eq "$SB_RC" 0 "disk fill exit status"
assert_contains "$SB_OUT" "No space left on device" "disk full"
total=$(awk '$1 == "total" { print $2 }' <<<"$SB_OUT")
[ "$total" -le $((16 << 20)) ] || fail "wrote $total bytes into a 16 MiB disk"
assert_contains "$SB_OUT" "answered" "the sandbox answers after the disk filled"
# One file past the per-file limit (RLIMIT_FSIZE, = the disk size by default).
sb_run --disk-mib 16 -- sh -c 'dd if=/dev/zero of=one bs=1M count=64 2>&1; stat -c "size %s" one'
size=$(awk '$1 == "size" { print $2 }' <<<"$SB_OUT")
[ "$size" -le $((16 << 20)) ] || fail "one file of $size bytes under a 16 MiB limit"

# Timeout: killed on time, flagged, returns (no assertion on wall time beyond the test's bound).
sb_run --timeout 1 --json -- sh -c 'sleep 300 & sleep 300'
assert_eq "$(jq -r .timed_out <<<"$SB_OUT")" true "timed_out"
assert_eq "$(jq -r .signal <<<"$SB_OUT")" 9 "signal"
assert_eq "$SB_RC" 137 "exit status 128+9"
sb_run --timeout 1 -- sleep 300
assert_eq "$SB_RC" 137 "exit status 128+9 without --json"
assert_contains "$SB_ERR" "timed out" "the timeout note"
echo ok
