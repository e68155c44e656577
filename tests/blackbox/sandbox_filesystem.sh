#!/bin/bash
# The file system: the image read-only (writes to /usr fail with EROFS, / is mounted ro), nothing
# of the host visible (a file planted in the host's /tmp is not there), a fresh /proc showing only
# the sandbox's processes, /proc/sys, /proc/sysrq-trigger, /proc/irq and /proc/bus mounted
# read-only (core_pattern cannot be written), kernel and host-identity files masked (kcore, keys,
# timer_list, sched_debug, latency_stats, cmdline, partitions, boot_id: those the kernel has),
# /proc/meminfo showing the sandbox's memory limit (read-only),
# /dev holding only the allowed nodes and links, a writable scratch directory on a tmpfs of the
# requested size, write_file refusing ".." and symlinks, no set-id file or device node in the
# image on the host, and an image cache no host user but root can read.
. "$(dirname "$0")/sandbox_common.sh"

# Masked /proc files: those this kernel has (a kernel may lack some: measured on the host first).
masked=
for f in kcore keys timer_list sched_debug latency_stats cmdline partitions sys/kernel/random/boot_id; do
    [ -e "/proc/$f" ] && masked="$masked /proc/$f"
done
echo "masked files this kernel has:$masked"
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
    echo LINKS; for l in fd stdin stdout stderr ptmx; do echo \"\$l \$(readlink /dev/\$l)\"; done
    echo MASKED; for f in $masked; do echo \"\$f \$(wc -c <\$f 2>&1) \$(awk -v p=\$f '\$5 == p { print \"mounted\" }' /proc/self/mountinfo)\"; done
    echo END
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
assert_eq "$(section SYS LINKS)" "" "/sys is empty"
links=$(section LINKS MASKED | tr '\n' ';')
assert_eq "$links" "fd /proc/self/fd;stdin /proc/self/fd/0;stdout /proc/self/fd/1;stderr /proc/self/fd/2;ptmx pts/ptmx;" "the /dev links"
masked_out=$(section MASKED END)
for f in $masked; do
    assert_contains "$masked_out" "$f 0 mounted" "$f masked (empty, a mount over it)"
done

# /proc/meminfo shows the sandbox's memory limit, not the host's memory, and cannot be changed:
# the mount over it is read-only and its file (in the run directory) is not worker's.
sb_run --memory-mib 96 -- sh -c "
    echo MEM; grep -E '^(MemTotal|MemAvailable|SwapTotal):' /proc/meminfo
    echo MOUNT; awk '\$5 == \"/proc/meminfo\" { print \$4, \$6 }' /proc/self/mountinfo
    echo WRITE; (echo x > /proc/meminfo) 2>&1; f=\$(awk '\$5 == \"/proc/meminfo\" { print \$4 }' /proc/self/mountinfo)
    (echo x > /tmp\$f) 2>&1; rm -f /tmp\$f 2>&1; grep -c . /proc/meminfo
    echo END"
echo "$SB_OUT"
assert_eq "$SB_RC" 0 "exit status (meminfo)"
mem=$(section MEM MOUNT | tr -s ' ' | tr '\n' ';')
assert_eq "$mem" "MemTotal: 98304 kB;MemAvailable: 98304 kB;SwapTotal: 0 kB;" "/proc/meminfo"
host_total=$(awk '/^MemTotal:/ { print $2 }' /proc/meminfo)
[ "$host_total" != 98304 ] || fail "the host has exactly the sandbox's limit: the test proves nothing"
[[ $(section MOUNT WRITE) =~ ^/ephemeral-run-[A-Za-z0-9]{6}/meminfo\ ro, ]] ||
    fail "/proc/meminfo is not a read-only mount of the run directory's file: $(section MOUNT WRITE)"
meminfo_write=$(section WRITE END)
assert_contains "$(sed -n 1p <<<"$meminfo_write")" "Read-only file system" "a write to /proc/meminfo"
assert_contains "$(sed -n 2p <<<"$meminfo_write")" "Permission denied" "a write to the meminfo file"
assert_contains "$(sed -n 3p <<<"$meminfo_write")" "Permission denied" "removing the meminfo file"
assert_eq "$(tail -n 1 <<<"$meminfo_write")" 10 "/proc/meminfo unchanged"

# The image on the host: no set-id program a host user could run, no device node (mmdebstrap's
# dev/console was 0666).
setid=$(find "$SB_IMAGE_REAL" -xdev -type f -perm /6000 | head -n 5)
assert_eq "$setid" "" "set-id files in the image"
devs=$(find "$SB_IMAGE_REAL" -xdev \( -type c -o -type b \) | head -n 5)
assert_eq "$devs" "" "device nodes in the image"

# The image cache is root's alone (`ephemerald image build` makes its root 0700): a host user can
# neither list it nor read the image, its kernel or its disk through it.
cache=$(dirname "$(dirname "$(dirname "$SB_IMAGE_REAL")")")
assert_eq "$(stat -c '%u %a' "$cache")" "0 700" "the image cache's owner and mode ($cache)"
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@" 2>&1; }
assert_contains "$(as_nobody cat "$SB_IMAGE_REAL/etc/os-release")" "Permission denied" \
    "a host user reading the image"
assert_contains "$(as_nobody ls "$cache")" "Permission denied" "a host user listing the cache"
assert_contains "$(as_nobody sh -c "ls '$SB_IMAGE_REAL/../microvm/'")" "Permission denied" \
    "a host user reaching the microVM's kernel and disk"

# write_file (--file) refuses to leave the scratch directory or to follow a link.
echo data >"$TEST_TMP/f"
sb_run --file "$TEST_TMP/f:../escape" -- true
[ "$SB_RC" -ne 0 ] || fail "--file wrote to ../escape"
sb_run --file "$TEST_TMP/f:sub/dir/f" -- cat sub/dir/f
assert_eq "$SB_OUT" data "--file into a new subdirectory"
echo ok
