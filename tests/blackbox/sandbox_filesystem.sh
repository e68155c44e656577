#!/bin/bash
# The file system: the image read-only (writes to /usr fail with EROFS, / is mounted ro), nothing
# of the host visible (a file planted in the host's /tmp is not there), a fresh /proc showing only
# the sandbox's processes, /proc/sys, /proc/sysrq-trigger, /proc/irq and /proc/bus mounted
# read-only (core_pattern cannot be written), /dev holding only the allowed nodes, a writable
# scratch directory on a tmpfs of the requested size, and write_file refusing ".." and symlinks.
. "$(dirname "$0")/sandbox_common.sh"

planted="$TEST_TMP/planted-$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')"
echo secret >"$planted"
sb_run --disk-mib 8 -- sh -c "
    echo ROOT; awk '\$5 == \"/\" { print \$6 }' /proc/self/mountinfo
    echo USR; mkdir /usr/ephemeral-test 2>&1; touch /etc/ephemeral-test 2>&1
    echo PLANTED; ls -la '$planted' 2>&1; cat '$planted' 2>&1; ls /tmp
    echo PROCS; for p in /proc/[0-9]*; do echo \"\${p#/proc/} \$(cat \$p/comm)\"; done
    echo PROCRO; awk '{ print \$5, \$6 }' /proc/self/mountinfo | grep '^/proc/'
    echo CORE; (echo '|/tmp/x' > /proc/sys/kernel/core_pattern) 2>&1; cat /proc/sys/kernel/core_pattern
    echo SYSRQ; ls /proc/sysrq-trigger 2>&1; (echo h > /proc/sysrq-trigger) 2>&1
    echo DEV; ls -A /dev
    echo SCRATCH; echo hello > file && cat file; df -k /tmp | tail -n 1 | awk '{ print \$2 }'
    echo SYS; ls /sys 2>&1 | head -n 3
"
echo "$SB_OUT"
assert_eq "$SB_RC" 0 "exit status"
section() { sed -n "/^$1\$/,/^$2\$/p" <<<"$SB_OUT" | sed '1d;$d'; }
[[ $(section ROOT USR) == ro,* ]] || fail "/ is not mounted read-only: $(section ROOT USR)"
usr=$(section USR PLANTED)
assert_contains "$(grep mkdir <<<"$usr")" "Read-only file system" "mkdir in /usr"
assert_contains "$(grep touch <<<"$usr")" "Read-only file system" "a new file in /etc"
planted_out=$(section PLANTED PROCS)
assert_contains "$planted_out" "No such file or directory" "the planted host file"
assert_not_contains "$planted_out" "secret" "the planted host file's content"
[[ $(tail -n 1 <<<"$planted_out") =~ ^ephemeral-run-[A-Za-z0-9]{6}$ ]] ||
    fail "the sandbox's /tmp holds more than its run directory: $planted_out"
procs=$(section PROCS PROCRO)
assert_contains "$procs" "1 ephemeral-init" "pid 1 is ephemeral-init"
n=$(wc -l <<<"$procs")
[ "$n" -le 6 ] || fail "$n processes visible in /proc: $procs"
while read -r pid comm; do
    case "$comm" in ephemeral-init | sh | cat) ;; *) fail "a foreign process is visible: $pid $comm" ;; esac
done <<<"$procs"
ro=$(section PROCRO CORE)
for p in /proc/sys /proc/irq /proc/bus; do
    [ -e "$p" ] || continue
    grep -q "^$p ro," <<<"$ro" || fail "$p is not mounted read-only: $ro"
done
core=$(section CORE SYSRQ)
assert_not_contains "$core" "|/tmp/x" "core_pattern was written"
assert_contains "$core" "Read-only file system" "the write to core_pattern"
sysrq=$(section SYSRQ DEV)
if [ -e /proc/sysrq-trigger ]; then
    grep -q "^/proc/sysrq-trigger ro," <<<"$ro" || fail "/proc/sysrq-trigger is not read-only: $ro"
else
    assert_contains "$sysrq" "No such file or directory" "sysrq-trigger (absent on this kernel)"
fi
dev=$(section DEV SCRATCH | tr '\n' ' ')
assert_eq "$dev" "fd full null ptmx pts random shm stderr stdin stdout tty urandom zero " "/dev"
scratch=$(section SCRATCH SYS)
assert_eq "$(sed -n 1p <<<"$scratch")" hello "scratch is writable"
assert_eq "$(sed -n 2p <<<"$scratch")" 8192 "/tmp is a tmpfs of --disk-mib"
assert_eq "$(sed -n '/^SYS$/,$p' <<<"$SB_OUT" | sed 1d)" "" "/sys is empty"

# write_file (--file) refuses to leave the scratch directory or to follow a link.
echo data >"$TEST_TMP/f"
sb_run --file "$TEST_TMP/f:../escape" -- true
[ "$SB_RC" -ne 0 ] || fail "--file wrote to ../escape"
sb_run --file "$TEST_TMP/f:sub/dir/f" -- cat sub/dir/f
assert_eq "$SB_OUT" data "--file into a new subdirectory"
echo ok
