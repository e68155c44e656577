/*
 * harden.h - the same hardening for the commands of every backend, applied by ephemeral-init.
 *
 * Under the namespaces backend the jail has done everything before the init starts: the init is
 * worker (uid 1000) with no capability, no_new_privs and the seccomp filter, and every command
 * inherits that (the init does nothing here; nor under the unit tests' fake backend). Under
 * gvisor (runsc starts the init as root of the sandbox, with a few capabilities) and microvm (the
 * guest kernel starts it as root) nobody has: started with --keeper, the init does it itself, and
 * runs as the keeper of the sandbox, which the commands cannot signal, stop, trace or re-limit:
 *
 *   init      real and saved uid/gid 0, effective (hence file system) uid/gid 1000, groups {1000},
 *             every capability set empty, bounding set empty, no_new_privs, the seccomp filter
 *   command   uid/gid 1000 in all three (the child drops the real and saved 0 before exec, which
 *             needs no capability), the rest inherited
 *
 * The kernel lets a process signal, trace or re-limit another only when their uids match in the
 * ways docs/SECURITY.md lists; a command (all 1000) never matches the init (real and saved 0),
 * while the init's effective 1000 matches every command (so it kills their process groups, and
 * the files it writes for the host are worker's, as under the jail).
 */
#ifndef EPH_GUEST_HARDEN_H
#define EPH_GUEST_HARDEN_H

#include <stdbool.h>

/* Makes the init the keeper as above (it must be root). Returns 0 or a negative errno, with what
 * failed in *what; the init must not serve after a failure. */
int eph_guest_harden(const char **what);

/* True once the init is the keeper: each command must then drop to worker
 * (eph_guest_harden_child). */
bool eph_guest_harden_keeper(void);

/* In a command's process before exec, under the keeper: worker in every uid and gid. 0 or a
 * negative errno. */
int eph_guest_harden_child(void);

#endif
