/*
 * host.h - what the gvisor backend keeps on the host beyond one sandbox (docs/SANDBOX.md):
 *
 *   - the shared guest files, /run/ephemeral/gvisor/guest-<hash>/: guest/init and
 *     guest/ephemeral-gvisor-compat.so (copies, bind-mounted read-only at /.ephemeral in every
 *     sandbox), ld.so.preload (mounted over /etc/ld.so.preload) and key (what they were made
 *     from). Made once per build of the init and the library, whatever the image, and reused by
 *     every sandbox of every process; only a sandbox's own parts (its spec, runsc state and logs)
 *     are written per sandbox. A process holds a shared lock on the directory it uses until it
 *     exits, so that no sweep removes it under a running sandbox;
 *   - the probe records, /run/ephemeral/gvisor-probe/<hash>: one per runsc, init, library, image
 *     and host boot that booted a probe sandbox, so that a later process skips the probe (and
 *     `runsc --version`).
 *
 * Both are root's, under /run (a tmpfs: a reboot clears them), and both are named by a hash of
 * what they depend on, so that two installations, or a server and a rebuilt CLI, do not replace
 * each other's.
 */
#ifndef EPH_SANDBOX_GVISOR_HOST_H
#define EPH_SANDBOX_GVISOR_HOST_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define EPH_GVISOR_RUN_ROOT "/run/ephemeral"
#define EPH_GVISOR_RUN_DIR EPH_GVISOR_RUN_ROOT "/gvisor"
#define EPH_GVISOR_PROBE_DIR EPH_GVISOR_RUN_ROOT "/gvisor-probe"
/* Where the guest files are mounted inside, and the compat library's name there. */
#define EPH_GVISOR_GUEST_MOUNT "/.ephemeral"
#define EPH_GVISOR_COMPAT_NAME "ephemeral-gvisor-compat.so"
/* A shared directory no process holds and none has taken up for this long is removed by the
 * next sweep (a later build's, or a server's start). */
#define EPH_GVISOR_SHARED_IDLE_S 600

/* The shared guest files for this init and compat library: made if missing (or if the copy there
 * does not match), then locked for the rest of the process. *dir gets its path (cap >= PATH_MAX).
 * 0, or a negative errno (a source that cannot be read or copied). Thread-safe. */
int eph_gvisor_shared_get(const char *init, const char *compat, char *dir, size_t cap)
    __attribute__((warn_unused_result));

/* Removes the shared directories that no process holds and that have been idle for
 * EPH_GVISOR_SHARED_IDLE_S, and the half-made ones of dead processes. The number removed. */
int eph_gvisor_shared_sweep(void);

/* What a probe's success depends on, apart from runsc's version line: the host's boot and the
 * device, inode, mtime and size of runsc, the init, the library and the image root. 0, -ENOENT
 * (one of them is missing) or -ENAMETOOLONG. */
int eph_gvisor_probe_ident(const char *runsc, const char *init, const char *compat,
                           const char *root, char *out, size_t cap)
    __attribute__((warn_unused_result));

/* The version line in the record for ident, or -ENOENT: with it the record can be checked
 * without running `runsc --version` (ident names runsc's file). */
int eph_gvisor_probe_recorded_version(const char *ident, char *version, size_t cap)
    __attribute__((warn_unused_result));

/* True when the record for ident is root's, writable by no one else, and says version + ident. */
bool eph_gvisor_probe_remembered(const char *version, const char *ident);

/* Records a probe's success (atomically; failures are ignored: the next process probes again). */
void eph_gvisor_probe_remember(const char *version, const char *ident);

/* Removes path and everything under it without following a symbolic link (four levels deep at
 * most: a bundle and runsc's state). 0 or the first negative errno. */
int eph_gvisor_rm_tree(const char *path);

/* Creates dfd/name (O_EXCL, mode) holding data. 0 or a negative errno. */
int eph_gvisor_write_file_at(int dfd, const char *name, const char *data, size_t len, mode_t mode)
    __attribute__((warn_unused_result));

#endif
