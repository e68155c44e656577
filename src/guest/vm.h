/*
 * vm.h - ephemeral-init as the first process of a microVM (the microvm backend).
 *
 * Under the namespaces and gvisor backends the host builds the sandbox and starts init as worker
 * with its two directories as arguments and the channel on fd 3. In a microVM nobody is there to
 * do that: the kernel runs /init of the initramfs as root with no arguments. vm.c does, inside
 * the guest, what the jail does on the host, and then hands init.c exactly the situation it
 * expects, so that the protocol loop is the same code under every backend.
 *
 * Compiled only into the static ephemeral-init (never into the daemon).
 */
#ifndef EPH_GUEST_VM_H
#define EPH_GUEST_VM_H

#include <stdbool.h>

/* True when a kernel started this process as its init: PID 1 with no arguments. (The jails start
 * init as PID 1 of a PID namespace too, but always with two.) */
bool eph_guest_vm_started_by_kernel(int argc);

/* Turns the fresh guest into the sandbox, as root, in order: devtmpfs, proc and sysfs; the kernel
 * command line (ephemeral.mode=vm and the run's parameters); the initramfs's kernel modules; the
 * read-only root disk, a size-limited tmpfs on /tmp with the run directory, a fresh /proc and a
 * minimal /dev in it; the virtio-serial port named "ephemeral" on fd 3; the switch into the new
 * root; hostname, loopback, user.max_user_namespaces 0, rlimits. It returns as root: init.c then
 * makes the process the sandbox's keeper (guest/harden.h), as under gvisor. Returns init's argv
 * ({"ephemeral-init", "--keeper", SCRATCH, HOME, NULL}, static storage).
 * On any failure it writes the reason to the kernel log (the VM's console) and restarts the
 * machine, which ends it (QEMU runs with -no-reboot): it never returns an error. */
char **eph_guest_vm_setup(void);

#endif
