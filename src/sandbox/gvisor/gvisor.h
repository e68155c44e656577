/*
 * gvisor.h - the `gvisor` backend: the image as an OCI bundle run by runsc (gVisor), so that
 * gVisor's application kernel, the Sentry, stands between the workload and the host kernel.
 *
 * The rest of the service sees only the ops table. Each sandbox is one `runsc run` child of the
 * server with a private bundle and runsc state under /run/ephemeral/gvisor/<tag>-<pid>-gv<n>/, the
 * image as the read-only root, a size-limited tmpfs on /tmp, no network (--network=none), worker
 * (1000:1000) without capabilities under no_new_privs, rlimits, and cgroup limits through the
 * OCI `linux.resources`. ephemeral-init speaks the guest protocol over the container's stdio (one
 * end of a socketpair). docs/SANDBOX.md describes the bundle and why each piece is there.
 *
 * eph_gvisor_spec_json() is exposed for the unit tests: it is the whole mapping from a plan to
 * the OCI config.json, with no side effect.
 */
#ifndef EPH_SANDBOX_GVISOR_H
#define EPH_SANDBOX_GVISOR_H

#include <limits.h>
#include <stdint.h>

#include "sandbox/sandbox.h"

extern const struct eph_sandbox_ops eph_sandbox_gvisor_ops;

/* What the sandbox's config.json is made from; every path is a host path unless said otherwise. */
struct eph_gvisor_plan {
    const char *root;                 /* the image, resolved; mounted read-only as / */
    const char *guest_dir;            /* holds init and the compat library; mounted read-only */
    const char *preload_file;         /* mounted over /etc/ld.so.preload; NULL: not mounted */
    const char *cgroup_path;          /* "/ephemeral/<id>" */
    const char *run_dir;              /* inside: "/tmp/ephemeral-run-XXXXXX" */
    const char *scratch;              /* inside: run_dir + "/scratch" */
    const char *home;                 /* inside: run_dir + "/home" */
    struct eph_sandbox_limits limits; /* every field set (no zeros) */
};

/* The OCI runtime spec for plan, as a NUL-terminated JSON string the caller frees; 0, -ENOMEM or
 * -ENAMETOOLONG (a path that does not fit the fixed buffers). */
int eph_gvisor_spec_json(const struct eph_gvisor_plan *plan, char **out)
    __attribute__((warn_unused_result));

/* Host-side figures the spec derives from the limits (documented in docs/SANDBOX.md). */
#define EPH_GVISOR_SENTRY_MIB 128u         /* memory for the Sentry and gofer on top of the run's */
#define EPH_GVISOR_HOST_TASKS_PER_PROC 16u /* ptrace platform: host tasks per sandbox process */
#define EPH_GVISOR_HOST_TASKS_BASE 512u

#endif
