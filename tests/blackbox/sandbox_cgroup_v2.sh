#!/bin/bash
# The cgroup v2 path of the namespaces backend, on a host that may boot with v1: a private mount
# namespace with a fresh cgroup2 mount and no v1 hierarchy (so the backend finds only v2), then a
# sandbox in it whose limits must be the v2 files (memory.max, memory.swap.max, pids.max,
# cpu.max), whose processes must be in its cgroup (born there through clone3's CLONE_INTO_CGROUP,
# or joined by the child), and which must leave no cgroup behind.
#
# A controller serves one hierarchy at a time: where memory, pids or cpu are bound to a v1
# hierarchy in use (it has child cgroups, or is mounted in another namespace), the cgroup2 mount
# cannot get them and the test skips, saying which ones are missing.
. "$(dirname "$0")/sandbox_common.sh"

cg2=$TEST_TMP/cg2
mkdir -p "$cg2"
# What a fresh cgroup2 mount offers here, measured in a private mount namespace first.
offered=$(unshare -m --propagation private sh -c \
    "mount -t cgroup2 none '$cg2' && cat '$cg2/cgroup.controllers'") ||
    skip "cannot mount cgroup2 in a private mount namespace"
missing=
for c in memory pids cpu; do
    grep -qw "$c" <<<"$offered" || missing="$missing $c"
done
[ -z "$missing" ] || skip "cgroup v2 offers '${offered}' here: memory, pids and cpu are needed and${missing} are bound to cgroup v1 hierarchies in use (a controller moves to v2 only when its v1 hierarchy has no child cgroup and is mounted nowhere)"

# The sandbox, in a mount namespace where /sys/fs/cgroup is a tmpfs holding only the cgroup2 mount:
# the backend's detection sees no v1 hierarchy. It prints its cgroup and the limits' files.
out=$(timeout -k 10 "$SB_TIMEOUT" unshare -m --propagation private bash -c '
    set -e
    mount -t tmpfs none /sys/fs/cgroup
    mkdir /sys/fs/cgroup/unified
    mount -t cgroup2 none /sys/fs/cgroup/unified
    "$0" sandbox run --backend namespaces --memory-mib 80 --pids 40 --vcpus 1 -- sh -c "
        cat /proc/self/cgroup; echo SANDBOX-OK; exec sleep 60" &
    pid=$!
    # The sandbox waits until it is told to end (SIGTERM: `sandbox run` then destroys it):
    # meanwhile its cgroup holds its processes. Bounded: at most 20 s.
    for _ in $(seq 400); do
        d=$(ls -d /sys/fs/cgroup/unified/ephemeral/*-*-* 2>/dev/null | head -n 1)
        if [ -n "$d" ] && [ -s "$d/cgroup.procs" ]; then
            echo "LIMITS $(cat "$d/memory.max") $(cat "$d/pids.max") $(cat "$d/cpu.max")"
            break
        fi
        sleep 0.05
    done
    kill -TERM $pid
    wait $pid || true
    echo "LEFT $(ls /sys/fs/cgroup/unified/ephemeral | grep -c -- "-" || true)"
' "$EPHD" 2>&1)
echo "$out"
assert_contains "$out" "SANDBOX-OK" "a sandbox runs on cgroup v2"
assert_contains "$out" "0::/" "the sandbox's processes see their own cgroup namespace root"
assert_contains "$out" "LIMITS 83886080 40 100000 100000" "memory.max, pids.max and cpu.max"
assert_contains "$out" "LEFT 0" "no cgroup left on v2"
sb_assert_clean
echo ok
