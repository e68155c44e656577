/*
 * service.h - what the server's parts share: configuration, store, sandbox backend, models, and
 * the objects created at start-up that hold the server's running state (the live-run registry,
 * the worker pool, the warm sandbox pool). Nothing of that state lives in file-level variables:
 * everything is reached from the struct eph_service that daemon/serve.c creates and passes down,
 * and a test builds one of its own. The parts that work on runs have headers of their own, above
 * this one: the worker (worker.h), the lease keeper (lease.h), the fence (fence.h), the nodes of a
 * shared store (cluster.h), and the pool that wires them to the scheduler (workers.h).
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
    struct eph_drives *drives;          /* live sandboxes a caller drives (drive.h); NULL: none */
};

struct eph_model *eph_service_model(struct eph_service *svc, const char *id);

/* Queues a run that is registered live and stored as queued. */
int eph_service_submit(struct eph_service *svc, const char *run_id);
/* Hands a registered, stored run to the settler thread, for a run that ends at once (cancelled
 * or refused before it started). 0, or -ESHUTDOWN when no settler runs, -ENOMEM. */
int eph_service_settle(struct eph_service *svc, const char *run_id);
/* Starts the thread of a sandbox registered live and stored queued (workers.c, drive.h). */
int eph_service_submit_sandbox(struct eph_service *svc, const char *sandbox_id);
/* Wakes one idle worker to look for a run to claim (shared stores). */
void eph_service_kick(struct eph_service *svc);

#endif
