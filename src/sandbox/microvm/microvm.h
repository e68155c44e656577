/*
 * microvm.h - the `microvm` backend: one QEMU `microvm` machine per sandbox, so that a whole guest
 * kernel and the hypervisor stand between the workload and the host kernel.
 *
 * The rest of the service sees only the ops table. Each sandbox is one qemu-system-x86_64 child of
 * the server: Debian's cloud kernel, an initramfs holding ephemeral-init (PID 1 of the guest,
 * src/guest/vm.c) and the kernel modules the guest needs, the image as a read-only virtio disk,
 * no network device at all, and the guest protocol over a virtio-serial port whose host end is one
 * half of a socketpair. QEMU runs under its own seccomp filter (-sandbox), as a host uid of its
 * own without capabilities, in a cgroup of its own (memory, pids, CPU), and dies with the server
 * (PR_SET_PDEATHSIG). docs/SANDBOX.md has the details and the reasons.
 *
 * The accelerator is KVM when the probe has seen KVM boot a guest on this host. Software emulation
 * (TCG, seconds per boot) is used only when asked for twice: `--backend microvm` (never `auto`)
 * and EPHEMERAL_MICROVM_ALLOW_TCG=1 in the environment. It is for tests on hosts without a usable
 * KVM, never for production.
 *
 * Files: the kernel and root disk are built by `ephemerald image build` (src/daemon/image_vm.c)
 * next to the image, under <image>/../microvm/. Nothing is written per sandbox: the initramfs and
 * the console are memory files, the channel a socketpair. Per shape of sandbox (memory, CPUs,
 * and the files above), the first create saves a parked machine in <image>/../microvm/snapshots/
 * that the later ones restore instead of booting (snapshot.h).
 */
#ifndef EPH_SANDBOX_MICROVM_H
#define EPH_SANDBOX_MICROVM_H

#include "sandbox/sandbox.h"

extern const struct eph_sandbox_ops eph_sandbox_microvm_ops;

/* Guest memory on top of the run's: the guest kernel, init and page cache of the root disk. */
#define EPH_MICROVM_GUEST_EXTRA_MIB 64u
/* Host memory on top of the guest's, for QEMU itself (its code, device state, and under TCG the
 * translation cache, which -accel tcg,tb-size bounds). */
#define EPH_MICROVM_QEMU_MIB 160u
/* Host tasks for one QEMU: its vCPU, I/O and RCU threads and a block thread pool. */
#define EPH_MICROVM_QEMU_TASKS 256u

#endif
