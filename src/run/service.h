/*
 * service.h - what the server's parts share: configuration, store, sandbox backend, models, and
 * the objects created at start-up that hold the server's running state (the live-run registry,
 * the worker pool, the warm sandbox pool). Nothing of that state lives in file-level variables:
 * everything is reached from the struct eph_service that daemon/serve.c creates and passes down,
 * and a test builds one of its own.
 */
#ifndef EPH_SERVICE_H
#define EPH_SERVICE_H

#include <stdatomic.h>
#include <stdbool.h>

#include "agent/model.h"
#include "broker/guard.h"
#include "common/config.h"
#include "sandbox/sandbox.h"
#include "store/store.h"

struct eph_live;
struct eph_live_registry;
struct eph_readiness;
struct eph_service;
struct eph_sandbox_pool;
struct eph_scheduler;

/* Whether the server can do its work (the store, the image, the backend), as the API asks it:
 * daemon/readiness.c implements it (eph_readiness_ops) and serve sets it with the state it owns,
 * so that the API reaches readiness through the service, not up into daemon/. */
struct eph_readiness_ops {
    /* Whether a run could be started now; when not, what is missing and what to do in why. */
    bool (*can_run)(struct eph_readiness *r, struct eph_service *svc, char *why, size_t whylen);
    /* The /healthz report (new reference, NULL when out of memory); *ready false while a part
     * is unusable or the server is shutting down. */
    json_t *(*report)(struct eph_readiness *r, struct eph_service *svc, bool *ready);
};

/* The lease keeper's view of its contact with the store (lease.c; its thread only). */
struct eph_lease_keeper {
    uint64_t contact_since_ns; /* since when every pass reached the store in time; 0: not now */
    uint64_t last_ok_ns;       /* the end of the last pass that did */
    bool failing;              /* renewals fail (said once) */
    bool waiting;              /* reaping waits for a lease of contact again (said once) */
};

struct eph_fence;

struct eph_images;

struct eph_service {
    struct eph_config *cfg;
    struct eph_store *store;
    const struct eph_sandbox_ops *sandbox_ops; /* the backend chosen at start-up; NULL when none
                                                  could be (a server started not ready) */
    struct eph_sandbox_config sandbox_cfg;
    struct eph_model **models; /* opened, parallel to cfg->models */
    atomic_bool shutting_down;
    char node_id[40]; /* this node's name in run leases (cfg->node_id or the host name) */
    struct eph_readiness *readiness; /* store, image and backend; NULL: always ready (tests) */
    const struct eph_readiness_ops *readiness_ops; /* on readiness, set with it */
    struct eph_live_registry *live;     /* the runs this process works on or follows (live.h) */
    struct eph_lease_keeper keeper;     /* lease.c */
    struct eph_fence *fence;            /* fence.c; NULL on a single-node store */
    struct eph_scheduler *sched;        /* the worker pool (scheduler.h); NULL until started */
    struct eph_sandbox_pool *pool;      /* warm sandboxes (sandbox/pool.h); NULL: none */
    struct eph_store_listener listener; /* other nodes' notifications (cluster.c) */
    struct eph_guard_own broker_own;    /* the server's own sockets, which no broker request may
                                           reach (eph_egress_learn_own, before the workers) */
    struct eph_images *images;          /* image builds (image/service.h); NULL: none here */
};

struct eph_model *eph_service_model(struct eph_service *svc, const char *id);

/* The worker pool of the service (service.c): cfg->max_concurrent_runs workers running
 * eph_worker_run, the settler, and the lease keeper, in svc->sched (scheduler.h). */
int eph_service_start_workers(struct eph_service *svc) __attribute__((warn_unused_result));
/* Stops it (eph_scheduler_stop with the grace period); svc->sched stays until the service is
 * released (eph_scheduler_free), refusing new runs. */
void eph_service_stop_workers(struct eph_service *svc, unsigned grace_seconds);
/* Queues a run that is registered live and stored as queued. */
int eph_service_submit(struct eph_service *svc, const char *run_id);
/* Hands a registered, stored run to the settler thread, for a run that ends at once (cancelled
 * or refused before it started). 0, or -ESHUTDOWN when no settler runs, -ENOMEM. */
int eph_service_settle(struct eph_service *svc, const char *run_id);
/* Wakes one idle worker to look for a run to claim (shared stores). */
void eph_service_kick(struct eph_service *svc);
/* The lease keeper (lease.c): every lease_renew_seconds it renews the lease of each run this
 * node works on (checkpointing its compute), stops the runs whose lease another node took over,
 * and settles as worker_lost the runs of any node whose lease expired. The scheduler's periodic
 * pass; one pass, for tests and start-up: */
void eph_lease_pass(struct eph_service *svc);
/* Seconds between two passes: lease_renew_seconds, lowered to fit well within the lease. */
unsigned eph_lease_renew_seconds(const struct eph_config *cfg);
/* How long after sending a renewal (or the claim) a node may work on the run without a newer one:
 * its fence (three quarters of the lease). */
uint64_t eph_lease_fence_span_ns(const struct eph_config *cfg);

/* The fence (fence.c, docs/RUN.md "Fencing"), on shared stores only: a watchdog process of its
 * own, which needs neither the store nor this process to run, kills each sandbox whose run's
 * fence (eph_live_set_fence) has passed; and a thread that pauses a sandbox shortly before its
 * fence while the lease cannot be renewed (so that a store outage does not kill healthy runs),
 * keeps the watchdog from killing it while this process is alive to watch, and resumes it when the
 * lease is renewed. start: 0 on a single-node store (nothing started). arm: from when the
 * sandbox exists (after eph_live_attach_sandbox); disarm: before it is destroyed (a paused sandbox
 * is killed then). Both do nothing without a fence. */
int eph_fence_start(struct eph_service *svc) __attribute__((warn_unused_result));
void eph_fence_stop(struct eph_service *svc);
void eph_fence_arm(struct eph_fence *f, struct eph_live *l, struct eph_sandbox *sb);
void eph_fence_disarm(struct eph_fence *f, struct eph_live *l);
/* Sandboxes the watchdog killed at their fence, since start (tests, metrics). */
unsigned eph_fence_kills(struct eph_fence *f);

/* Several nodes on one shared store (cluster.c); each does nothing on a single-node store.
 * start: listens for other nodes' events, queued runs and cancels. follow: the live entry of a
 * run, registered as followed when another node works on it (NULL when finished or unknown);
 * the caller puts it. cancel: tells the node working on the run. take_next (every store): claims
 * the next queued run by the store's fair rule, with max_concurrent_runs_per_org, among the runs
 * no node holds and waiting (this node's own queue), and registers it live here (-ENOENT when
 * none). */
int eph_cluster_start(struct eph_service *svc);
struct eph_live *eph_cluster_follow(struct eph_service *svc, const char *run_id);
int eph_cluster_cancel(struct eph_service *svc, const char *run_id);
int eph_cluster_take_next(struct eph_service *svc, const char *const *waiting, size_t nwaiting,
                          char *run_id, size_t idlen);

/* Start-up recovery: runs a dead server left starting or running are finished as failed
 * (worker_lost) and settled for what was measured; queued runs are registered and queued. */
int eph_recovery_run(struct eph_service *svc, unsigned *lost, unsigned *requeued);

/* Finishes a run whose worker is gone as failed (worker_lost), charged what was measured up to its
 * last checkpoint, with the closing events (sandbox.destroyed when it had a sandbox). Non-zero
 * lease_expired_before_ms: only if its lease is still expired then (another node's run), and
 * without retrying a store that fails (the lease keeper must get back to its renewals; its next
 * pass tries again). 0 when settled here, -EALREADY when it was not ours to settle (finished or
 * renewed meanwhile). */
int eph_worker_settle_lost(struct eph_service *svc, const char *run_id,
                           int64_t lease_expired_before_ms);

/* One run, start to settlement (worker.c), on a worker or the settler thread, never on an HTTP
 * thread (an HTTP handler hands a run it withdrew to the settler: eph_scheduler_settle). */
void eph_worker_run(struct eph_service *svc, const char *run_id);
/* A stored, live, never started run that could not be queued: marks it refused (code and
 * message, constant strings) and hands it to the settler, which settles it failed, nothing
 * charged, its whole reservation released, its live entry closed. Safe on an HTTP thread: it
 * never works on the run there. Only when no settler can take it (stopping, out of memory) does it
 * settle here, in one attempt without retries. 0 when handed on or settled, else -errno. */
int eph_worker_refuse(struct eph_service *svc, const char *run_id, const char *code,
                      const char *message);
/* The error message a zero-data-retention run stores and shows for code: msg itself for the codes
 * whose messages are the server's own words, else a fixed sentence (worker.c). */
const char *eph_worker_zdr_message(const char *code, const char *msg);

#endif
