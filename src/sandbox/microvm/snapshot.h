/*
 * snapshot.h - the microvm backend's saved machines: a guest booted once per image and machine
 * shape up to the point where its init waits for the host, saved by QEMU's migration into a file,
 * and restored for each later sandbox instead of booted (docs/SANDBOX.md, "MicroVM snapshots").
 *
 * microvm.c starts the QEMU processes; this module holds what is not about starting them: the
 * key a saved machine is filed under, the conversation with the saving QEMU's monitor (QMP), the
 * resume line a restored guest reads first, and the cache directory's upkeep.
 */
#ifndef EPH_SANDBOX_MICROVM_SNAPSHOT_H
#define EPH_SANDBOX_MICROVM_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "guest/protocol.h"
#include "sandbox/sandbox.h"

/* What the parked guest says, and the resume line's cap: the guest's protocol's. */
#define EPH_VM_PARKED_LINE EPH_PROTO_VM_PARKED
#define EPH_VM_RESUME_MAX EPH_PROTO_VM_RESUME_MAX
/* Saved machines kept per image directory (the newest; a different shape is a different file). */
#define EPH_VM_SNAPSHOTS_KEPT 4u

/* The key (16 lowercase hex) of a saved machine: a hash of the given text (the saving QEMU's
 * command line, without what differs per sandbox) and of the identity (device, inode, size,
 * modification time) of each file named, so that a new QEMU, init, kernel, module set or disk
 * is a new key. 0, or a negative errno when a file cannot be looked at. */
int eph_vm_snapshot_key(const char *text, const char *const *files, size_t nfiles, char key[17]);

/* Reads the channel until the parked line; anything else first is an error (-EPROTO), as is the
 * channel closing (-EPIPE) or the deadline (CLOCK_MONOTONIC ns) passing (-ETIMEDOUT). */
int eph_vm_wait_parked(int chan, uint64_t deadline_ns);

/* Saves the running machine whose monitor is qmp into state_fd and makes QEMU quit: capabilities,
 * the file handed over (SCM_RIGHTS), migration unthrottled, waited for until it completed. why
 * gets QEMU's reason on failure. 0 or a negative errno. */
int eph_vm_qmp_save(int qmp, int state_fd, uint64_t deadline_ns, char *why, size_t whylen);

/* The line a restored guest reads first (newline included): the run's directory and limits as
 * the kernel command line gives them to a booted guest, then what makes this clone unique: 32
 * random bytes for the kernel's pool, the wall clock (ns since the epoch), a random boot id.
 * Returns its length, or a negative errno. */
int eph_vm_resume_line(char *buf, size_t cap, const char *run_dir,
                       const struct eph_sandbox_limits *l);

/* Keeps the EPH_VM_SNAPSHOTS_KEPT newest saved machines of dir and removes the rest, and the
 * temporary files of builds whose process is gone. Returns how many files it removed. */
int eph_vm_snapshot_prune(const char *dir);

#endif
