/*
 * hostid.h - host uids and gids leased to sandboxes, unique on the host across every server.
 *
 * A sandbox's processes (namespaces backend) or its QEMU (microvm backend) run as a host id no
 * host user owns, one per live sandbox. Two servers on one host must never hand out the same id:
 * the kernel charges per-user counters (inotify instances, pending signals, message queues, user
 * namespaces) to it, and two QEMUs of one id could read each other's memory. The lease is a lock
 * file per id, `<dir>/<hex id>`, held with flock() for the sandbox's life: the kernel releases it
 * when the holder closes it or dies, so a crashed server leaks nothing. The directory is
 * /run/ephemeral/ids (or $EPHEMERAL_RUN_DIR/ids), root-only.
 */
#ifndef EPH_SANDBOX_HOSTID_H
#define EPH_SANDBOX_HOSTID_H

#include <stdint.h>

struct eph_hostid_lease {
    uint32_t id;
    int fd; /* the held lock; -1 when none */
};

/* Leases the lowest free id of [base, base + count). 0, or -EAGAIN when all are held, or another
 * negative errno when the lock directory cannot be used. */
int eph_hostid_acquire(uint32_t base, uint32_t count, struct eph_hostid_lease *lease);
void eph_hostid_release(struct eph_hostid_lease *lease);

#endif
