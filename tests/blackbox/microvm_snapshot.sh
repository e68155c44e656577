#!/bin/bash
# MicroVMs restored, not booted: the first sandbox of a shape (image, memory, CPUs, QEMU, init,
# kernel) boots a guest to where its init waits for the host and saves it next to the image; the
# later ones restore it. Restored clones are unique: their own boot id, random bytes and a clock
# stepped to the host's (the saved one stood still); they get their own run's limits; a saved
# machine that does not restore is removed and the sandbox boots, as does one that cannot be
# saved; EPHEMERAL_MICROVM_SNAPSHOTS=0 boots every time. Nothing is left behind (vm_run checks after every run).
. "$(dirname "$0")/microvm_common.sh"

# An image directory of this test's own (the same kernel and disk), so that its saved machines
# are this test's alone.
real=$(dirname "$(readlink -f "$EPHEMERAL_IMAGE")")
img=$TEST_TMP/img
mkdir -p "$img/rootfs" "$img/microvm"
for f in complete kernel root.img; do
    ln -s "$(readlink -f "$real/microvm/$f")" "$img/microvm/$f"
done
export EPHEMERAL_IMAGE=$img/rootfs EPHEMERALD_LOG_LEVEL=debug
snaps=$img/microvm/snapshots
probe='cat /proc/sys/kernel/random/boot_id; head -c 16 /dev/urandom | od -An -tx1 | tr -d " \n"; echo
date +%s.%N; df -m /tmp | awk "NR == 2 {print \$2}"; ulimit -n'
line() { sed -n "$1p" <<<"$(jq -r .stdout <<<"$VM_OUT")"; }

# 1. The first: saved, then restored. (The command runs a while, so that the saved clock is
# seconds behind by the next restore.)
vm_run --json --memory-mib 192 -- sh -c "$probe; sleep 3"
assert_eq "$VM_RC" 0 "first run (stderr: $VM_ERR)"
assert_contains "$VM_ERR" "saved a parked microVM" "the first run saves the machine"
assert_contains "$VM_ERR" "restoring the saved microVM" "and restores it"
n=$(find "$snaps" -name '*.state' | wc -l)
assert_eq "$n" 1 "one saved machine"
saved=$(find "$snaps" -name '*.state')
[ "$(stat -c %a "$saved")" = 600 ] || fail "the saved machine is not root's alone: $(stat -c %a "$saved")"
first_boot=$(line 1)

# 2. Two more, restored without a save, each unique.
declare -A boot rand
for i in 1 2; do
    vm_run --json --memory-mib 192 --disk-mib $((32 * i)) -- sh -c "$probe"
    assert_eq "$VM_RC" 0 "restore $i (stderr: $VM_ERR)"
    ! grep -q "saved a parked microVM" <<<"$VM_ERR" || fail "restore $i saved the machine again"
    assert_contains "$VM_ERR" "restoring the saved microVM" "restore $i restores"
    boot[$i]=$(line 1)
    rand[$i]=$(line 2)
    [[ ${boot[$i]} =~ ^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$ ]] ||
        fail "restore $i: boot id '${boot[$i]}'"
    # The clock: the host's, though the saved machine is seconds old.
    host=$(date +%s.%N)
    age=$(awk -v h="$host" -v s="$(stat -c %Y "$saved")" 'BEGIN {print h - s}')
    awk -v a="$age" 'BEGIN {exit !(a >= 2)}' || fail "the saved machine is only ${age}s old: the clock check would prove nothing"
    awk -v g="$(line 3)" -v h="$host" 'BEGIN {d = h - g; exit !(d >= 0 && d < 2)}' ||
        fail "restore $i: the guest's clock $(line 3) is not the host's $host"
    # This run's limits, not the saved machine's (which has none yet).
    assert_eq "$(line 4)" $((32 * i)) "restore $i: its /tmp"
done
[ "${boot[1]}" != "${boot[2]}" ] || fail "two restored VMs share the boot id ${boot[1]}"
[ "${boot[1]}" != "$first_boot" ] && [ "${boot[2]}" != "$first_boot" ] || fail "a restore kept the first's boot id"
[ "${rand[1]}" != "${rand[2]}" ] || fail "two restored VMs read the same random bytes ${rand[1]}"

# 3. Another shape is another saved machine.
vm_run --json --memory-mib 160 -- true
assert_eq "$VM_RC" 0 "another shape (stderr: $VM_ERR)"
assert_contains "$VM_ERR" "saved a parked microVM" "another shape saves its own"
assert_eq "$(find "$snaps" -name '*.state' | wc -l)" 2 "two saved machines"

# 4. A saved machine that does not restore: removed, and the sandbox boots.
truncate -s 4096 "$saved"
vm_run --json --memory-mib 192 -- sh -c 'echo booted'
assert_eq "$VM_RC" 0 "after a broken save (stderr: $VM_ERR)"
assert_eq "$(jq -r .stdout <<<"$VM_OUT")" booted "the command ran"
assert_contains "$VM_ERR" "did not restore" "the failed restore is reported"
[ ! -e "$saved" ] || fail "the broken saved machine is still there"

# 5. Switched off: a boot, and nothing saved.
before=$(find "$snaps" -name '*.state' | wc -l)
EPHEMERAL_MICROVM_SNAPSHOTS=0 vm_run --json --memory-mib 128 -- sh -c "$probe"
assert_eq "$VM_RC" 0 "switched off (stderr: $VM_ERR)"
! grep -q -e "saved a parked" -e "restoring the saved" <<<"$VM_ERR" || fail "switched off, yet: $VM_ERR"
assert_eq "$(find "$snaps" -name '*.state' | wc -l)" "$before" "nothing saved when switched off"
assert_eq "$(find "$snaps" -name '*.tmp-*' | wc -l)" 0 "no temporary file left"

# 6. A machine that cannot be saved (here: its directory cannot be made): the sandbox boots.
img2=$TEST_TMP/img2
mkdir -p "$img2/rootfs" "$img2/microvm"
for f in complete kernel root.img; do
    ln -s "$(readlink -f "$real/microvm/$f")" "$img2/microvm/$f"
done
: >"$img2/microvm/snapshots"
EPHEMERAL_IMAGE=$img2/rootfs vm_run --json --memory-mib 192 -- sh -c 'echo booted'
assert_eq "$VM_RC" 0 "unsaveable (stderr: $VM_ERR)"
assert_eq "$(jq -r .stdout <<<"$VM_OUT")" booted "unsaveable: the command ran"
assert_contains "$VM_ERR" "cannot save a microVM of this shape (booting instead)" "the failed save is reported"
echo "microvm snapshots: ok"
