/*
 * scheduler.h - the bounded worker pool: a queue of run ids (whose order the store's fair claim
 * decides when ops->take_next is set, FIFO otherwise), a fixed number of worker threads that
 * take from it, one settler thread for runs that must be finished at once, and an
 * optional periodic pass (the lease keeper).
 *
 * The scheduler knows nothing of what a run is: it calls the functions of its ops table with run
 * ids. The service (run/service.c) supplies the worker (eph_worker_run), the shared-store claim
 * and the lease pass; a unit test supplies stubs. No HTTP thread ever calls ops->work: a handler
 * that must have a run finished now (a cancelled run taken out of the queue) hands it to the
 * settler with eph_scheduler_settle().
 *
 * Ownership: eph_scheduler_start() allocates; eph_scheduler_stop() joins every thread (after it
 * every call still works and submit refuses with -ESHUTDOWN); eph_scheduler_free() frees, once
 * nothing can call it any more.
 */
#ifndef EPH_SCHEDULER_H
#define EPH_SCHEDULER_H

#include <stddef.h>

struct eph_scheduler;

/* The most ids of its own queue a scheduler hands to ops->take_next at once. */
#define EPH_SCHEDULER_WAITING_MAX 64

struct eph_scheduler_ops {
    void *ctx;
    /* Works on one run, start to settlement, on a worker or the settler thread. */
    void (*work)(void *ctx, const char *run_id);
    /* Optional: claims from the store the next run by its fair rule (docs/RUN.md) into run_id;
     * waiting holds the ids in this scheduler's own queue, oldest first (at most
     * EPH_SCHEDULER_WAITING_MAX), that only this node can claim. 0, -ENOENT when there is none,
     * another -errno on failure (-ENOTCONN: the database is out of reach). With it, the store
     * chooses the order: a worker looks when a run is submitted, on each kick, once every
     * period_seconds (with ops->periodic) and when its run ends; a worker that claims a run
     * kicks another. Idle workers never poll the store on their own. Without it: FIFO. */
    int (*take_next)(void *ctx, const char *const *waiting, size_t nwaiting, char *run_id,
                     size_t idlen);
    /* Optional: called every period_seconds on a thread of its own (the lease keeper). */
    void (*periodic)(void *ctx);
    /* Optional: the grace period of eph_scheduler_stop is over with runs still working; make
     * them stop (cancel them). */
    void (*cancel_all)(void *ctx);
};

/* Starts workers (at least 1) worker threads, the settler, and the periodic thread when
 * ops->periodic is set. ops is copied. 0 or -errno (nothing left running). */
int eph_scheduler_start(const struct eph_scheduler_ops *ops, unsigned workers,
                        unsigned period_seconds, struct eph_scheduler **out)
    __attribute__((warn_unused_result));
/* Queues a run id for the next free worker. 0 or -ENOMEM, -ESHUTDOWN once stopping. */
int eph_scheduler_submit(struct eph_scheduler *s, const char *run_id);
/* Takes a run out of the queue before any worker has it: 0 when it was queued (the caller now
 * owns it), -ENOENT when it is not. */
int eph_scheduler_withdraw(struct eph_scheduler *s, const char *run_id);
/* Hands a run to the settler thread, which calls ops->work for it without waiting for a free
 * worker. For runs that end at once (withdrawn and cancelled). 0 or -ENOMEM, -ESHUTDOWN. */
int eph_scheduler_settle(struct eph_scheduler *s, const char *run_id);
/* Wakes one idle worker to look for a run with ops->take_next. */
void eph_scheduler_kick(struct eph_scheduler *s);
/* Runs waiting for a worker, and runs being worked on (workers and settler). */
unsigned eph_scheduler_queue_depth(struct eph_scheduler *s);
unsigned eph_scheduler_running(struct eph_scheduler *s);
/* Drops the queue (its runs stay queued in the store), lets running ones finish for up to
 * grace_seconds, then calls ops->cancel_all and joins every thread (the settler after it has
 * finished what it was handed). NULL or a second call does nothing. */
void eph_scheduler_stop(struct eph_scheduler *s, unsigned grace_seconds);
/* Stops s if needed, and frees it. NULL does nothing. */
void eph_scheduler_free(struct eph_scheduler *s);

#endif
