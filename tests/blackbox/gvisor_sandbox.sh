#!/bin/bash
# The gvisor backend through `ephemerald sandbox run --backend gvisor`: the command runs as worker
# in /tmp/ephemeral-run-XXXXXX/scratch under gVisor's kernel, with no network (curl cannot resolve
# a name), the image read-only, the host's file system invisible, no capability; coreutils work
# (the statx compat library); a command past its timeout is killed, output is capped, limits hold,
# an interrupt returns at once; and after each run nothing is left: no bundle, runsc process or
# cgroup.
. "$(dirname "$0")/gvisor_common.sh"

# Identity, place, kernel.
gv_run --json -- sh -c 'whoami; pwd; id -G; hostname; cat /proc/version'
assert_eq "$GV_RC" 0 "exit status"
assert_eq "$(jq -r .backend <<<"$GV_OUT")" gvisor "json backend"
out=$(jq -r .stdout <<<"$GV_OUT")
assert_eq "$(sed -n 1p <<<"$out")" worker "whoami"
scratch=$(sed -n 2p <<<"$out")
[[ $scratch =~ ^/tmp/ephemeral-run-[A-Za-z0-9]{6}/scratch$ ]] || fail "pwd is '$scratch'"
assert_eq "$(jq -r .scratch_dir <<<"$GV_OUT")" "$scratch" "scratch_dir"
assert_eq "$(sed -n 3p <<<"$out")" 1000 "groups"
assert_eq "$(sed -n 4p <<<"$out")" sandbox "hostname"
# gVisor's kernel answers: it calls itself Linux 4.4.0, whatever the host runs (dmesg, which
# said "gVisor", is refused by the seccomp filter like in the namespaces jail).
assert_contains "$(sed -n 5p <<<"$out")" "Linux version 4.4.0 " "gVisor's kernel answers"
[ "$(sed -n 5p <<<"$out")" != "$(cat /proc/version)" ] || fail "the host's kernel answers"

# Status and streams.
gv_run -- sh -c 'echo to-out; echo to-err >&2; exit 7'
assert_eq "$GV_RC" 7 "exit status 7"
assert_eq "$GV_OUT" to-out "stdout"
assert_eq "$GV_ERR" to-err "stderr"

# No privilege: every capability set empty, no_new_privs.
# (gVisor's /proc/self/status has no NoNewPrivs line: ask prctl.)
gv_run -- sh -c 'cat /proc/self/status; python3 -c "import ctypes; print(\"nnp\", ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))"'
for f in CapEff CapPrm CapInh CapBnd; do
    assert_eq "$(awk -v f="$f:" '$1 == f { print $2 }' <<<"$GV_OUT")" 0000000000000000 "$f"
done
assert_contains "$GV_OUT" "nnp 1" "no_new_privs"

# No network: names do not resolve, no address is reachable.
gv_run -- curl -sS -m 8 https://example.com
[ "$GV_RC" -ne 0 ] || fail "curl succeeded"
assert_contains "$GV_ERR" "Could not resolve host: example.com" "curl error"
gv_run -- python3 -c '
import socket
s = socket.socket(); s.settimeout(3)
try:
    s.connect(("1.1.1.1", 80)); print("connected")
except OSError as e:
    print("refused:", e)
print(sorted(i[1] for i in socket.if_nameindex()))'
assert_not_contains "$GV_OUT" connected "a raw address is unreachable"
assert_contains "$GV_OUT" "['lo']" "only loopback"

# The image is read-only (even where its permissions say world-writable); writes go to /tmp.
gv_run -- sh -c 'touch /var/tmp/x; touch /usr/bin/x; echo data > /tmp/ok && cat /tmp/ok'
assert_contains "$GV_ERR" "/var/tmp/x': Read-only file system" "read-only image"
assert_contains "$GV_ERR" "/usr/bin/x'" "no write in /usr/bin"
assert_eq "$GV_OUT" data "the tmpfs is writable"
[ ! -e "$EPHEMERAL_IMAGE/var/tmp/x" ] || fail "a write reached the image"

# The host's file system is invisible: only the image, /tmp, /proc, /dev, /sys and the two
# read-only guest mounts; the host file made for this test is not there, nor the bundle.
secret=$TEST_TMP/host-secret-$$
echo "host secret" >"$secret"
gv_run -- sh -c "cat '$secret'; ls /work /run/ephemeral 2>&1; ls -A /.ephemeral | tr '\n' ' '; echo; cut -d' ' -f2 /proc/mounts | sort | tr '\n' ' '"
assert_not_contains "$GV_OUT" "host secret" "a host file"
assert_contains "$GV_ERR$GV_OUT" "No such file or directory" "host paths"
assert_contains "$GV_OUT" "ephemeral-gvisor-compat.so init " "only the init and the compat library in /.ephemeral"
assert_contains "$GV_OUT" "/ /.ephemeral /dev /dev/pts /etc/ld.so.preload /proc /sys /tmp" "mounts"

# coreutils' stat works (statx with AT_NO_AUTOMOUNT, which this runsc refuses without the shim).
gv_run -- sh -c 'printf "sandbox proof\n" > /tmp/proof.txt && ls -l /tmp/proof.txt && stat -c %s /tmp/proof.txt'
assert_eq "$GV_RC" 0 "ls -l status ($GV_ERR)"
grep -qE '^-rw-r--r-- 1 worker worker 14 .* /tmp/proof.txt$' <<<"$GV_OUT" || fail "ls -l: $GV_OUT"
assert_contains "$GV_OUT" $'\n14' "stat"

# A command past its timeout is killed, flagged, and the call returns.
start=$SECONDS
gv_run --timeout 1 -- sh -c 'echo started; sleep 60'
assert_eq "$GV_RC" 137 "timed-out status"
assert_eq "$GV_OUT" started "output before the timeout"
assert_contains "$GV_ERR" "timed out after 1.000 s" "timeout note"
[ $((SECONDS - start)) -lt 30 ] || fail "the timeout took $((SECONDS - start)) s"

# Output is capped, and the note says how much was dropped.
gv_run --output-cap 1000 -- sh -c 'head -c 100000 /dev/zero | tr "\0" a'
assert_eq "$GV_RC" 0 "flood status"
assert_eq "${#GV_OUT}" 1000 "kept bytes"
assert_contains "$GV_ERR" "stdout truncated: 1000 of 100000 bytes shown, 99000 dropped" "truncation note"

# Limits: processes (the Sentry enforces RLIMIT_NPROC), scratch disk.
gv_run --pids 40 -- python3 -c '
import os, signal, time
kids = []
try:
    while len(kids) < 100:
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        kids.append(pid)
    print("forked", len(kids))
except OSError as e:
    print("refused after", len(kids), e.errno)
for k in kids:
    os.kill(k, signal.SIGKILL)'
assert_contains "$GV_OUT" "refused after" "--pids 40 ($GV_ERR, status $GV_RC)"
n=$(awk '{ print $3 }' <<<"$GV_OUT")
[ "$n" -lt 40 ] || fail "--pids 40 allowed $n processes"
gv_run --disk-mib 8 -- sh -c 'dd if=/dev/zero of=/tmp/fill bs=1M count=20 2>/dev/null; ls -l /tmp/fill | cut -d" " -f5'
[ "$(tail -n 1 <<<"$GV_OUT")" -le $((8 << 20)) ] || fail "disk fill wrote $GV_OUT"

# Files in, through the protocol.
printf 'from the host\n' >"$TEST_TMP/in.txt"
gv_run --file "$TEST_TMP/in.txt:sub/in.txt" -- cat sub/in.txt
assert_eq "$GV_OUT" "from the host" "--file"

# An interrupt (SIGTERM to the caller) returns at once and still removes everything.
out=$TEST_TMP/int.out
"$EPHD" sandbox run --backend gvisor --timeout 60 -- sh -c 'echo started; sleep 600' >"$out" 2>&1 &
pid=$!
for _ in $(seq 200); do grep -q started "$out" && break; sleep 0.05; done
grep -q started "$out" || fail "the interrupted command did not start: $(cat "$out")"
kill -TERM "$pid"
start=$SECONDS
wait "$pid"
rc=$?
assert_eq "$rc" 143 "status after SIGTERM"
[ $((SECONDS - start)) -lt 15 ] || fail "the interrupt took $((SECONDS - start)) s"
assert_contains "$(cat "$out")" "interrupted by signal 15" "interrupt message"
gv_assert_clean

# A command cannot kill or stop its init (gVisor does not shield a namespace's init, the init's
# uids do: gvisor_doors has every door); kill -9 -1 kills the command's own processes only.
gv_run -- sh -c 'kill -9 1; echo "kill=$?"; kill -STOP 1; echo "stop=$?"'
assert_eq "$GV_RC" 0 "status after kill -9 1 ($GV_ERR)"
assert_eq "$GV_OUT" "kill=1
stop=1" "kill -9 1 and kill -STOP 1 refused"
assert_contains "$GV_ERR" "Operation not permitted" "kill -9 1"
gv_run -- sh -c 'kill -9 -1; sleep 1'
assert_eq "$GV_RC" 137 "kill -9 -1 kills the command's shell, not the init"
# The init dying mid-command (killed from the host, through runsc) ends the sandbox: the caller
# says so and nothing is left.
out=$TEST_TMP/died.out
"$EPHD" sandbox run --backend gvisor --timeout 60 -- sh -c 'echo started; sleep 600' >"$out" 2>&1 &
pid=$!
for _ in $(seq 200); do grep -q started "$out" && break; sleep 0.05; done
grep -q started "$out" || fail "the command did not start: $(cat "$out")"
bundle=$(ls -d /run/ephemeral/gvisor/run-"$pid"-gv*) || fail "no bundle for $pid"
runsc --root="$bundle/state" kill "${bundle##*/}" KILL || fail "runsc kill failed"
wait "$pid"
assert_eq "$?" 125 "status after the init was killed ($(cat "$out"))"
assert_contains "$(cat "$out")" "sandbox died" "the init killed"
gv_assert_clean
# A caller killed outright takes its sandbox with it (runsc has a parent-death signal, the sandbox
# is attached to runsc); what it leaves (bundle, runsc state, cgroup) is removed by the next
# server's start-up.
out=$TEST_TMP/orphan.out
"$EPHD" sandbox run --backend gvisor --timeout 60 -- sh -c 'echo started; sleep 600' >"$out" 2>&1 &
pid=$!
for _ in $(seq 200); do grep -q started "$out" && break; sleep 0.05; done
grep -q started "$out" || fail "the orphaned command did not start: $(cat "$out")"
kill -KILL "$pid"
wait "$pid" 2>/dev/null
for _ in $(seq 100); do
    ps -eo args= | grep -v grep | grep -q "/run/ephemeral/gvisor/run-$pid-gv" || break
    sleep 0.05
done
! ps -eo args= | grep -v grep | grep -q "/run/ephemeral/gvisor/run-$pid-gv" ||
    fail "runsc outlived its killed caller"
start_server --sandbox gvisor
for d in /run/ephemeral/gvisor/run-"$pid"-gv* /sys/fs/cgroup/*/ephemeral/run-"$pid"-gv*; do
    [ -e "$d" ] && fail "not removed at start-up: $d"
done
gv_assert_clean
echo ok
