#!/bin/bash
# No privilege inside: every capability set empty (effective, permitted, inheritable, bounding,
# ambient), no_new_privs set, seccomp in filter mode; worker is not host root: the uid map sends
# uid 1000 to an unprivileged host id and nothing else is mapped, and seen from the host the
# sandbox's processes run as that id.
. "$(dirname "$0")/sandbox_common.sh"

sb_run -- sh -c 'cat /proc/self/status; echo MAP; cat /proc/self/uid_map /proc/self/gid_map; cat /proc/self/setgroups'
assert_eq "$SB_RC" 0 "exit status"
for f in CapEff CapPrm CapInh CapBnd CapAmb; do
    v=$(awk -v f="$f:" '$1 == f { print $2 }' <<<"$SB_OUT")
    assert_eq "$v" 0000000000000000 "$f"
done
assert_eq "$(awk '$1 == "NoNewPrivs:" { print $2 }' <<<"$SB_OUT")" 1 "NoNewPrivs"
assert_eq "$(awk '$1 == "Seccomp:" { print $2 }' <<<"$SB_OUT")" 2 "Seccomp mode"
maps=$(sed -n '/^MAP$/,$p' <<<"$SB_OUT" | sed 1d)
assert_eq "$(wc -l <<<"$maps")" 3 "one uid line, one gid line, setgroups"
read -r inside host count <<<"$(sed -n 1p <<<"$maps")"
assert_eq "$inside $count" "1000 1" "uid map"
[ "$host" -ne 0 ] || fail "worker is host root"
[ "$host" -ge 65536 ] || fail "worker maps to host uid $host, a range host users own"
! getent passwd "$host" >/dev/null || fail "host uid $host belongs to a host user"
assert_eq "$(sed -n 3p <<<"$maps")" deny "setgroups"

# From the host side, while a command sleeps: the process's uids are that unprivileged id.
sb_mark
out=$TEST_TMP/hold.out
"$EPHD" sandbox run --backend "$SB_BACKEND" --timeout 60 --memory-mib 96 --pids 77 --vcpus 1 -- \
    sh -c "echo started; sleep 600; : $SB_MARK" >"$out" 2>&1 &
holder=$!
_pids+=("$holder")
for _ in $(seq 200); do grep -q started "$out" && break; sleep 0.05; done
grep -q started "$out" || fail "the holding sandbox did not start: $(cat "$out")"
pid=
for _ in $(seq 100); do
    # The sandbox's shell carries the marker; ephemerald (also carrying it) runs as root.
    for p in $(sb_procs_with "$SB_MARK"); do
        [ "$(awk '$1 == "Uid:" { print $2 }' "/proc/$p/status" 2>/dev/null)" != 0 ] && pid=$p
    done
    [ -n "$pid" ] && break
    sleep 0.05
done
[ -n "$pid" ] || fail "cannot find the sandbox's process on the host"
uids=$(awk '$1 == "Uid:" { print $2, $3, $4, $5 }' "/proc/$pid/status")
gids=$(awk '$1 == "Gid:" { print $2, $3, $4, $5 }' "/proc/$pid/status")
for u in $uids $gids; do
    [ "$u" -ne 0 ] || fail "a sandbox process has host uid/gid 0: Uid $uids Gid $gids"
    [ "$u" -ge 65536 ] || fail "a sandbox process has a low host id: Uid $uids Gid $gids"
done
assert_eq "$(awk '$1 == "CapEff:" { print $2 }' "/proc/$pid/status")" 0000000000000000 "host view of CapEff"
assert_eq "$(awk '$1 == "Groups:" { print $2 }' "/proc/$pid/status")" "" "host view of the groups"
# The sandbox's cgroup, as the host sees it: memory without swap, pids, one CPU of quota.
v1=$(awk -F: '$2 == "memory" { print $3 }' "/proc/$pid/cgroup")
if [ -n "$v1" ]; then
    pids_dir=/sys/fs/cgroup/pids$(awk -F: '$2 == "pids" { print $3 }' "/proc/$pid/cgroup")
    cpu_dir=/sys/fs/cgroup/cpu$(awk -F: '$2 ~ /(^|,)cpu(,|$)/ { print $3 }' "/proc/$pid/cgroup")
    mem_dir=/sys/fs/cgroup/memory$v1
    [[ $mem_dir == */ephemeral/run-* ]] || fail "the sandbox is not in its own memory cgroup: $v1"
    assert_eq "$(cat "$mem_dir/memory.limit_in_bytes")" $((96 << 20)) "memory limit"
    if [ -e "$mem_dir/memory.memsw.limit_in_bytes" ]; then
        assert_eq "$(cat "$mem_dir/memory.memsw.limit_in_bytes")" $((96 << 20)) "memory+swap limit"
    else
        assert_eq "$(cat "$mem_dir/memory.swappiness")" 0 "swappiness"
    fi
    assert_eq "$(cat "$pids_dir/pids.max")" 77 "pids.max"
    assert_eq "$(cat "$cpu_dir/cpu.cfs_quota_us")/$(cat "$cpu_dir/cpu.cfs_period_us")" 100000/100000 "cpu quota"
else
    dir=$(awk -F: '$1 == "0" { print $3 }' "/proc/$pid/cgroup")
    root=$(awk '$9 == "cgroup2" { print $5; exit }' /proc/self/mountinfo)
    [[ $dir == */ephemeral/run-* ]] || fail "the sandbox is not in its own cgroup: $dir"
    assert_eq "$(cat "$root$dir/memory.max")" $((96 << 20)) "memory.max"
    [ ! -e "$root$dir/memory.swap.max" ] || assert_eq "$(cat "$root$dir/memory.swap.max")" 0 "memory.swap.max"
    assert_eq "$(cat "$root$dir/pids.max")" 77 "pids.max"
    assert_eq "$(cat "$root$dir/cpu.max")" "100000 100000" "cpu.max"
fi
# SIGTERM to the caller interrupts the sandbox, which is destroyed (nothing may be left).
kill -TERM "$holder"
wait "$holder"
rc=$?
assert_eq "$rc" $((128 + 15)) "status of the interrupted run"
assert_contains "$(cat "$out")" "interrupted" "the interrupted run says so"
sb_assert_clean
echo ok
