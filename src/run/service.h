/*
 * service.h - what the server's parts share: configuration, store, sandbox backend, models, and
 * the worker pool that runs queued runs.
 */
#ifndef EPH_SERVICE_H
#define EPH_SERVICE_H

#include <stdatomic.h>
#include <stdbool.h>

#include "agent/model.h"
#include "daemon/config.h"
#include "sandbox/sandbox.h"
#include "store/store.h"

struct eph_live;
struct eph_readiness;

struct eph_service {
    struct eph_config *cfg;
    struct eph_store *store;
    const struct eph_sandbox_ops *sandbox_ops; /* the backend chosen at start-up; NULL when none
                                                  could be (a server started not ready) */
    struct eph_sandbox_config sandbox_cfg;
    struct eph_model **models; /* opened, parallel to cfg->models */
    atomic_bool shutting_down;
    char node_id[40]; /* this node's name in run leases (cfg->node_id or the host name) */
    struct eph_readiness *readiness; /* store, image and backend (daemon/readiness.h) */
};

struct eph_model *eph_service_model(struct eph_service *svc, const char *id);

/* The worker pool (scheduler.c). start: spawns cfg->max_concurrent_runs workers. */
int eph_scheduler_start(struct eph_service *svc);
/* Queues a run that is registered live and stored as queued. */
int eph_scheduler_submit(const char *run_id);
/* Takes a run out of the queue before any worker has it: 0 when it was queued here (the caller
 * now owns its settlement), -ENOENT when it is not (a worker has it, or it is not ours). */
int eph_scheduler_withdraw(const char *run_id);
/* The lease keeper (scheduler.c): every lease_renew_seconds it renews the lease of each run this
 * node works on (checkpointing its compute), stops the runs whose lease another node took over,
 * and settles as worker_lost the runs of any node whose lease expired. Started by
 * eph_scheduler_start, stopped by eph_scheduler_stop. One pass, for tests and start-up: */
void eph_lease_pass(struct eph_service *svc);
/* Wakes one idle worker to look for a run to claim (shared stores). */
void eph_scheduler_kick(void);

/* Several nodes on one shared store (cluster.c); each does nothing on a single-node store.
 * start: listens for other nodes' events, queued runs and cancels. follow: the live entry of a
 * run, registered as followed when another node works on it (NULL when finished or unknown);
 * the caller puts it. cancel: tells the node working on the run. take_next: claims the oldest
 * unclaimed queued run and registers it live here (-ENOENT when none). */
int eph_cluster_start(struct eph_service *svc);
struct eph_live *eph_cluster_follow(struct eph_service *svc, const char *run_id);
int eph_cluster_cancel(struct eph_service *svc, const char *run_id);
int eph_cluster_take_next(struct eph_service *svc, char *run_id, size_t idlen);

/* Runs waiting for a worker. */
unsigned eph_scheduler_queue_depth(void);
unsigned eph_scheduler_running(void);
/* Stops taking new runs, lets running ones finish for up to grace_seconds, then cancels them,
 * and joins every worker. Queued runs stay queued in the store for the next start. */
void eph_scheduler_stop(unsigned grace_seconds);

/* Start-up recovery: runs a dead server left starting or running are finished as failed
 * (worker_lost) and settled for what was measured; queued runs are registered and queued. */
int eph_recovery_run(struct eph_service *svc, unsigned *lost, unsigned *requeued);

/* Finishes a run whose worker is gone as failed (worker_lost), charged what was measured up to its
 * last checkpoint, with the closing events (sandbox.destroyed when it had a sandbox). Non-zero
 * lease_expired_before_ms: only if its lease is still expired then (another node's run). 0 when
 * settled here, -EALREADY when it was not ours to settle (finished or renewed meanwhile). */
int eph_worker_settle_lost(struct eph_service *svc, const char *run_id,
                           int64_t lease_expired_before_ms);

/* One run, start to settlement (worker.c). */
void eph_worker_run(struct eph_service *svc, const char *run_id);
/* Settles a stored, live, never started run as failed with code and message: nothing charged,
 * its whole reservation released, its live entry closed. For a run that could not be queued. */
int eph_worker_refuse(struct eph_service *svc, const char *run_id, const char *code,
                      const char *message);

#endif
