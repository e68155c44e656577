/*
 * workers.c - the service's worker pool: the scheduler (scheduler.h) wired to the run's worker,
 * the shared-store claim and the lease keeper.
 */
#include <errno.h>

#include "run/cluster.h"
#include "run/drive.h"
#include "run/fence.h"
#include "run/lease.h"
#include "run/live.h"
#include "run/scheduler.h"
#include "run/worker.h"
#include "run/workers.h"

static void work(void *ctx, const char *run_id)
{
    eph_worker_run(ctx, run_id);
}

static int take_next(void *ctx, const char *const *waiting, size_t nwaiting, char *run_id,
                     size_t idlen)
{
    struct eph_service *svc = ctx;
    if (atomic_load(&svc->shutting_down))
        return -ESHUTDOWN;
    return eph_cluster_take_next(svc, waiting, nwaiting, run_id, idlen);
}

static void periodic(void *ctx)
{
    eph_lease_pass(ctx);
}

static void cancel_all(void *ctx)
{
    struct eph_service *svc = ctx;
    eph_live_cancel_all(svc->live);
}

int eph_service_start_workers(struct eph_service *svc)
{
    struct eph_scheduler_ops ops = {
        .ctx = svc,
        .work = work,
        .take_next = svc->store->ops->run_claim_next ? take_next : NULL,
        .periodic = periodic,
        .cancel_all = cancel_all,
    };
    int rc = eph_drives_new(&svc->drives);
    if (rc)
        return rc;
    if ((rc = eph_fence_start(svc))) {
        eph_drives_free(svc->drives);
        svc->drives = NULL;
        return rc;
    }
    rc = eph_scheduler_start(&ops, svc->cfg->max_concurrent_runs, eph_lease_renew_seconds(svc->cfg),
                             &svc->sched);
    if (rc) {
        eph_fence_stop(svc);
        eph_drives_free(svc->drives);
        svc->drives = NULL;
    }
    return rc;
}

int eph_service_submit_sandbox(struct eph_service *svc, const char *sandbox_id)
{
    return eph_drive_spawn(svc->drives, svc, sandbox_id, eph_worker_run);
}

void eph_service_stop_workers(struct eph_service *svc, unsigned grace_seconds)
{
    /* A sandbox waits for its caller, not for work to finish: each ends now (server_shutdown),
     * settled by its own thread. The registry stays (empty, refusing) until the service goes. */
    eph_drives_stop(svc->drives, svc->live);
    eph_scheduler_stop(svc->sched, grace_seconds);
    /* Every worker is done: no sandbox is left to fence. */
    eph_fence_stop(svc);
}
