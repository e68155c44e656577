/*
 * rlimits.c - per-process resource limits, a backstop under the cgroup.
 *
 * The cgroup bounds the sandbox as a whole; these bound each process: open files, the largest file
 * it may write (so one write cannot take the whole scratch disk before the tmpfs says full), no
 * core dumps, and a process count per user as a second wall behind pids.max. They are set after
 * the user namespace is created: RLIMIT_NPROC then counts worker's processes in this sandbox's
 * namespace only. Pending signals and message-queue bytes are set before it (early), because
 * those are kernel counters of the whole user namespace whose ceiling the kernel takes from the
 * creator's limits.
 */
#include <errno.h>
#include <sys/resource.h>

#include "sandbox/namespaces/namespaces.h"

static int set(int resource, uint64_t v)
{
    struct rlimit rl = {.rlim_cur = (rlim_t)v, .rlim_max = (rlim_t)v};
    if (setrlimit(resource, &rl) != 0)
        return -errno;
    return 0;
}

/* Set before the user namespace is created: the kernel copies these into the namespace as the
 * ceilings of the whole sandbox's pending signals and message-queue bytes (counted for every
 * process of the namespace together), and the process keeps them as its own. */
int eph_ns_rlimits_apply_early(void)
{
    int rc = set(RLIMIT_SIGPENDING, EPH_NS_SIGPENDING_MAX);
    if (rc)
        return rc;
    return set(RLIMIT_MSGQUEUE, EPH_NS_MSGQUEUE_MAX);
}

int eph_ns_rlimits_apply(const struct eph_ns_plan *p)
{
    int rc = set(RLIMIT_NOFILE, p->nofile);
    if (rc)
        return rc;
    rc = set(RLIMIT_FSIZE, p->fsize);
    if (rc)
        return rc;
    rc = set(RLIMIT_CORE, 0);
    if (rc)
        return rc;
    return set(RLIMIT_NPROC, p->nproc);
}
