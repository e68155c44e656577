/*
 * workers.h - the service's worker pool: the scheduler wired to the worker, the shared store's
 * claim and the lease keeper (workers.c). The top of run/: it calls every part below it.
 */
#ifndef EPH_WORKERS_H
#define EPH_WORKERS_H

#include "run/service.h"

/* The worker pool of the service (workers.c): cfg->max_concurrent_runs workers running
 * eph_worker_run, the settler, and the lease keeper, in svc->sched (scheduler.h). */
int eph_service_start_workers(struct eph_service *svc) __attribute__((warn_unused_result));
/* Stops it (eph_scheduler_stop with the grace period); svc->sched stays until the service is
 * released (eph_scheduler_free), refusing new runs. */
void eph_service_stop_workers(struct eph_service *svc, unsigned grace_seconds);

#endif
