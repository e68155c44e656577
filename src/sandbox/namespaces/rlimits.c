/*
 * rlimits.c - per-process resource limits, a backstop under the cgroup.
 *
 * The cgroup bounds the sandbox as a whole; these bound each process: open files, the largest file
 * it may write (so one write cannot take the whole scratch disk before the tmpfs says full), no
 * core dumps, and a process count per user as a second wall behind pids.max. They are set after
 * the user namespace is created: RLIMIT_NPROC then counts worker's processes in this sandbox's
 * namespace only, and the namespace's own ceiling stays the server's.
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
