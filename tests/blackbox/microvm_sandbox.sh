#!/bin/bash
# The microvm backend through `ephemerald sandbox run --backend microvm` (under TCG here, allowed
# explicitly): the command runs as worker in /tmp/ephemeral-run-XXXXXX/scratch inside a guest
# kernel, with no network device but lo (curl cannot resolve a name), the root disk read-only, no
# capability, the guest's memory as the limit; a command past its timeout is killed, output is
# capped; `auto` never picks software emulation; and after each run nothing is left: no QEMU
# process, no cgroup. Each boot costs seconds under TCG: the checks share few boots.
. "$(dirname "$0")/microvm_common.sh"

# One boot for identity, place, network, file system, privilege, memory and the output cap: the
# report goes to stdout, then 100000 bytes to stderr, which the cap cuts.
vm_run --json --memory-mib 256 --output-cap 8192 -- sh -c '
echo "user=$(whoami)"; echo "pwd=$(pwd)"; echo "groups=$(id -G)"
echo "ifaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d " " | tr "\n" " ")"
curl -sS -m 8 https://example.com >/dev/null 2>"$TMPDIR/curl.err"; echo "curl=$? $(cat "$TMPDIR/curl.err")"
touch /etc/ephemeral-probe 2>/dev/null && echo "root=writable" || echo "root=read-only"
{ echo > /ephemeral-probe; } 2>/dev/null && echo "top=writable" || echo "top=read-only"
echo scratch > f && echo "scratch=$(cat f)"
echo "caps=$(awk "/^Cap(Eff|Prm|Bnd)/ {print \$2}" /proc/self/status | tr "\n" " ")"
echo "kernel=$(uname -r)"
python3 -c "bytearray(600 << 20)" 2>/dev/null && echo "memory=unlimited" || echo "memory=limited"
head -c 100000 /dev/zero | tr "\0" x >&2'
assert_eq "$VM_RC" 0 "exit status (stderr: $VM_ERR)"
assert_eq "$(jq -r .backend <<<"$VM_OUT")" microvm "json backend"
out=$(jq -r .stdout <<<"$VM_OUT")
field() { sed -n "s/^$1=//p" <<<"$out"; }
assert_eq "$(field user)" worker "whoami"
scratch=$(field pwd)
[[ $scratch =~ ^/tmp/ephemeral-run-[A-Za-z0-9]{6}/scratch$ ]] || fail "pwd is '$scratch'"
assert_eq "$(jq -r .scratch_dir <<<"$VM_OUT")" "$scratch" "scratch_dir"
assert_eq "$(field groups)" 1000 "groups"
assert_eq "$(field ifaces)" "lo " "network interfaces"
assert_contains "$(field curl)" "Could not resolve host: example.com" "curl error"
assert_eq "$(field root)" read-only "/etc"
assert_eq "$(field top)" read-only "/"
assert_eq "$(field scratch)" scratch "the scratch directory is writable"
assert_eq "$(field caps)" "0000000000000000 0000000000000000 0000000000000000 " "capabilities"
assert_contains "$(field kernel)" cloud-amd64 "the guest runs Debian's cloud kernel"
assert_eq "$(field memory)" limited "600 MiB in a 256 MiB guest"
assert_eq "$(jq -r .stderr_total <<<"$VM_OUT")" 100000 "stderr total"
assert_eq "$(jq -r '.stderr | length' <<<"$VM_OUT")" 8192 "stderr cut at the cap"
assert_eq "$(jq -r .stderr_truncated <<<"$VM_OUT")" true "stderr marked truncated"

# A command past its timeout is killed, a background process with it; the VM still goes away.
start=$SECONDS
vm_run --timeout 1 -- sh -c 'sleep 60 & sleep 60; echo never'
assert_eq "$VM_RC" 137 "status of a timed-out command"
assert_contains "$VM_ERR" "timed out after 1.000 s" "timeout note"
assert_not_contains "$VM_OUT" never "output after the timeout"
[ $((SECONDS - start)) -lt 60 ] || fail "the timed-out run took $((SECONDS - start)) s"

# SIGTERM interrupts the VM (from the signal thread, during the boot or the command alike) and
# it is still destroyed: status 128+15, at once, nothing left.
vm_wait_qemu() { # runner pid: waits until its QEMU runs
    for _ in $(seq 600); do
        pgrep -f "qemu-system-x86_64 -name ephemeral-run-$1-vm" >/dev/null && return 0
        sleep 0.1
    done
    fail "no QEMU for the runner $1"
}
start=$SECONDS
"$EPHD" sandbox run --backend microvm -- sleep 60 >/dev/null 2>"$TEST_TMP/err" &
runner=$!
_pids+=("$runner")
vm_wait_qemu "$runner"
sleep 1
kill -TERM "$runner"
wait "$runner"
assert_eq "$?" 143 "status of an interrupted run ($(cat "$TEST_TMP/err"))"
[ $((SECONDS - start)) -lt 30 ] || fail "the interrupted run took $((SECONDS - start)) s"
vm_assert_clean

# A server killed outright: QEMU dies with it (PR_SET_PDEATHSIG), and the next server removes the
# cgroup it left.
"$EPHD" sandbox run --backend microvm -- sleep 60 >/dev/null 2>&1 &
runner=$!
_pids+=("$runner")
vm_wait_qemu "$runner"
kill -KILL "$runner"
wait "$runner" 2>/dev/null
for _ in $(seq 50); do
    pgrep -f "qemu-system-x86_64 -name ephemeral-run-$runner-vm" >/dev/null || break
    sleep 0.1
done
! pgrep -f "qemu-system-x86_64 -name ephemeral-run-$runner-vm" >/dev/null || fail "QEMU outlived its server"
ls -d /sys/fs/cgroup/*/ephemeral/run-$runner-vm* >/dev/null 2>&1 || fail "expected the dead runner's cgroup to be left for the sweep"
start_server
ls -d /sys/fs/cgroup/*/ephemeral/run-$runner-vm* >/dev/null 2>&1 && fail "the server did not remove the orphaned cgroup"
grep -q "orphaned microVM cgroup" "$SERVER_LOG" || echo "note: the orphan's cgroup was gone without the sweep's log line"
kill -TERM "$SERVER_PID"
wait "$SERVER_PID" 2>/dev/null

# `auto` never chooses software emulation, even when it is allowed for --backend microvm.
out=$(timeout 60 "$EPHD" sandbox run --backend auto --json -- true 2>/dev/null)
backend=$(jq -r .backend <<<"$out")
[ -n "$backend" ] && [ "$backend" != microvm ] || fail "auto chose '$backend' on a host without a booting KVM"
# Without the explicit permission, --backend microvm refuses and says why.
EPHEMERAL_MICROVM_ALLOW_TCG= timeout 60 "$EPHD" sandbox run --backend microvm -- true >/dev/null 2>"$TEST_TMP/err"
assert_eq "$?" 125 "microvm without KVM and without permission for TCG"
assert_contains "$(cat "$TEST_TMP/err")" "never chosen automatically" "the refusal says why"
vm_assert_clean
echo ok
