/*
 * scheduler.c - the bounded worker pool: a FIFO of queued run ids and max_concurrent_runs threads
 * that take from it. Runs are durable in the store; the queue is only the order in which this
 * process works on them, rebuilt from the store at start-up.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/money.h"
#include "run/live.h"
#include "run/service.h"

struct qitem {
    char id[EPH_RUN_ID_LEN + 1];
    struct qitem *next;
};

static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_cond = PTHREAD_COND_INITIALIZER;
static pthread_cond_t q_idle = PTHREAD_COND_INITIALIZER;
static struct qitem *q_head, *q_tail;
static unsigned q_depth, q_running;
static bool q_stopping;
static pthread_t *workers;
static unsigned nworkers;
static struct eph_service *q_svc;

/* The lease keeper's thread and its stop flag (under q_lock, signalled on lease_cond). */
static pthread_t lease_thread;
static bool lease_started;
static pthread_cond_t lease_cond;

static unsigned renew_seconds(const struct eph_config *cfg)
{
    unsigned lease = cfg->lease_seconds ? cfg->lease_seconds : 30;
    unsigned renew = cfg->lease_renew_seconds ? cfg->lease_renew_seconds : 10;
    /* A renewal must come well before the lease ends. */
    if (renew * 2 > lease)
        renew = lease / 3 ? lease / 3 : 1;
    return renew;
}

static void renew_one(struct eph_live *l, void *ctx)
{
    struct eph_service *svc = ctx;
    uint64_t last;
    bool closed;
    eph_live_state(l, &last, &closed);
    /* Only runs this node holds have a lease here: not the ones waiting in its queue, nor the
     * ones it follows for another node. */
    if (closed || !eph_live_worked_here(l))
        return;
    uint64_t start = eph_live_compute_start(l);
    uint64_t now = eph_clock_mono_ns();
    int64_t compute = start && now > start
                          ? (int64_t)eph_money_compute_cost(
                                now - start, svc->cfg->prices.compute_micros_per_second)
                          : 0;
    int rc = svc->store->ops->run_renew(
        svc->store, eph_live_id(l), svc->node_id,
        eph_clock_real_ms() + (int64_t)svc->cfg->lease_seconds * 1000, compute);
    if (rc == -ESTALE) {
        eph_live_state(l, &last, &closed);
        if (!closed && eph_live_compute_start(l)) {
            EPH_WARN("scheduler", "run %s: lease lost (settled by another node); stopping it",
                     eph_live_id(l));
            eph_live_lease_lost(l);
        }
    } else if (rc && rc != -ESTALE) {
        EPH_WARN("scheduler", "run %s: cannot renew its lease: %s", eph_live_id(l),
                 eph_strerror(rc));
    }
}

struct reap {
    struct eph_service *svc;
    int64_t now_ms;
};

static int reap_one(const struct eph_run *r, void *ctx)
{
    struct reap *rp = ctx;
    /* A run this process still works on is renewed, not reaped (a late keeper pass). */
    struct eph_live *l = eph_live_get(r->id);
    if (l) {
        bool ours = strcmp(r->node_id, rp->svc->node_id) == 0;
        eph_live_put(l);
        if (ours)
            return 0;
    }
    int rc = eph_worker_settle_lost(rp->svc, r->id, rp->now_ms);
    if (rc == 0)
        EPH_WARN("scheduler", "run %s: the lease of node %s expired: settled as worker_lost", r->id,
                 r->node_id);
    return 0;
}

void eph_lease_pass(struct eph_service *svc)
{
    eph_live_foreach(renew_one, svc);
    struct reap rp = {.svc = svc, .now_ms = eph_clock_real_ms()};
    svc->store->ops->runs_lease_expired(svc->store, rp.now_ms, reap_one, &rp);
}

static void *lease_main(void *arg)
{
    struct eph_service *svc = arg;
    unsigned every = renew_seconds(svc->cfg);
    pthread_mutex_lock(&q_lock);
    while (!q_stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += every;
        while (!q_stopping && pthread_cond_timedwait(&lease_cond, &q_lock, &ts) != ETIMEDOUT)
            ;
        if (q_stopping)
            break;
        pthread_mutex_unlock(&q_lock);
        eph_lease_pass(svc);
        pthread_mutex_lock(&q_lock);
    }
    pthread_mutex_unlock(&q_lock);
    return NULL;
}

/* Shared stores: with nothing queued here, an idle worker looks for a run no node holds when
 * kicked (a run was queued somewhere) and at least every renewal interval. */
static bool q_kicked;

void eph_scheduler_kick(void)
{
    pthread_mutex_lock(&q_lock);
    q_kicked = true;
    pthread_cond_signal(&q_cond);
    pthread_mutex_unlock(&q_lock);
}

/* Works on one run; q_running was counted by the caller under q_lock. */
static void run_one(const char *id)
{
    eph_worker_run(q_svc, id);
    pthread_mutex_lock(&q_lock);
    q_running--;
    pthread_cond_broadcast(&q_idle);
    pthread_mutex_unlock(&q_lock);
}

static void *worker_main(void *arg)
{
    (void)arg;
    bool shared = q_svc->store->ops->run_claim_next != NULL;
    unsigned every = renew_seconds(q_svc->cfg);
    for (;;) {
        pthread_mutex_lock(&q_lock);
        bool look = false;
        while (!q_head && !q_stopping && !look) {
            if (!shared) {
                pthread_cond_wait(&q_cond, &q_lock);
                continue;
            }
            if (q_kicked) {
                q_kicked = false;
                look = true;
                break;
            }
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += every;
            if (pthread_cond_timedwait(&q_cond, &q_lock, &ts) == ETIMEDOUT)
                look = true;
        }
        if (q_stopping) {
            pthread_mutex_unlock(&q_lock);
            return NULL;
        }
        if (!q_head) {
            pthread_mutex_unlock(&q_lock);
            char id[EPH_RUN_ID_LEN + 1];
            int trc = atomic_load(&q_svc->shutting_down)
                          ? -ESHUTDOWN
                          : eph_cluster_take_next(q_svc, id, sizeof(id));
            /* Without the database this node takes no run (and /healthz says so); the runs stay
             * queued for a node that can reach it. */
            static atomic_bool said_unreachable;
            if (trc == -ENOTCONN && !atomic_exchange(&said_unreachable, true))
                EPH_ERROR("scheduler", "the database cannot be reached: taking no runs");
            else if (trc != -ENOTCONN && atomic_exchange(&said_unreachable, false))
                EPH_INFO("scheduler", "the database answers again: taking runs");
            if (trc == 0) {
                pthread_mutex_lock(&q_lock);
                q_running++;
                pthread_mutex_unlock(&q_lock);
                /* Another run may be waiting: let another idle worker look too. */
                eph_scheduler_kick();
                run_one(id);
            }
            continue;
        }
        struct qitem *it = q_head;
        q_head = it->next;
        if (!q_head)
            q_tail = NULL;
        q_depth--;
        q_running++;
        pthread_mutex_unlock(&q_lock);
        run_one(it->id);
        free(it);
    }
}

int eph_scheduler_start(struct eph_service *svc)
{
    q_svc = svc;
    unsigned n = svc->cfg->max_concurrent_runs ? svc->cfg->max_concurrent_runs : 1;
    workers = calloc(n, sizeof(*workers));
    if (!workers)
        return -ENOMEM;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 1u << 20);
    for (unsigned i = 0; i < n; i++) {
        int rc = pthread_create(&workers[i], &attr, worker_main, NULL);
        if (rc) {
            pthread_attr_destroy(&attr);
            EPH_ERROR("scheduler", "cannot start worker %u: %s", i, strerror(rc));
            return -rc;
        }
        nworkers++;
    }
    pthread_attr_destroy(&attr);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&lease_cond, &ca);
    pthread_condattr_destroy(&ca);
    int rc = pthread_create(&lease_thread, NULL, lease_main, svc);
    if (rc) {
        EPH_ERROR("scheduler", "cannot start the lease keeper: %s", strerror(rc));
        return -rc;
    }
    lease_started = true;
    return 0;
}

int eph_scheduler_submit(const char *run_id)
{
    struct qitem *it = calloc(1, sizeof(*it));
    if (!it)
        return -ENOMEM;
    snprintf(it->id, sizeof(it->id), "%s", run_id);
    pthread_mutex_lock(&q_lock);
    if (q_tail)
        q_tail->next = it;
    else
        q_head = it;
    q_tail = it;
    q_depth++;
    pthread_cond_signal(&q_cond);
    pthread_mutex_unlock(&q_lock);
    return 0;
}

int eph_scheduler_withdraw(const char *run_id)
{
    int rc = -ENOENT;
    pthread_mutex_lock(&q_lock);
    struct qitem *prev = NULL;
    for (struct qitem *it = q_head; it; prev = it, it = it->next) {
        if (strcmp(it->id, run_id) != 0)
            continue;
        if (prev)
            prev->next = it->next;
        else
            q_head = it->next;
        if (q_tail == it)
            q_tail = prev;
        q_depth--;
        free(it);
        rc = 0;
        break;
    }
    pthread_mutex_unlock(&q_lock);
    return rc;
}

unsigned eph_scheduler_queue_depth(void)
{
    pthread_mutex_lock(&q_lock);
    unsigned n = q_depth;
    pthread_mutex_unlock(&q_lock);
    return n;
}

unsigned eph_scheduler_running(void)
{
    pthread_mutex_lock(&q_lock);
    unsigned n = q_running;
    pthread_mutex_unlock(&q_lock);
    return n;
}

void eph_scheduler_stop(unsigned grace_seconds)
{
    uint64_t deadline = eph_clock_mono_ns() + (uint64_t)grace_seconds * 1000000000u;
    pthread_mutex_lock(&q_lock);
    /* Queued runs stay queued in the store; drop them from this process's queue. */
    while (q_head) {
        struct qitem *it = q_head;
        q_head = it->next;
        free(it);
    }
    q_tail = NULL;
    q_depth = 0;
    pthread_mutex_unlock(&q_lock);

    pthread_mutex_lock(&q_lock);
    /* q_idle uses the real-time clock: wait in short slices against the monotonic deadline. */
    while (q_running && eph_clock_mono_ns() < deadline) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&q_idle, &q_lock, &ts);
    }
    unsigned still = q_running;
    pthread_mutex_unlock(&q_lock);
    if (still) {
        EPH_WARN("scheduler", "grace period over: cancelling %u running runs", still);
        eph_live_cancel_all();
    }
    pthread_mutex_lock(&q_lock);
    q_stopping = true;
    pthread_cond_broadcast(&q_cond);
    pthread_cond_broadcast(&lease_cond);
    pthread_mutex_unlock(&q_lock);
    if (lease_started) {
        pthread_join(lease_thread, NULL);
        lease_started = false;
    }
    for (unsigned i = 0; i < nworkers; i++)
        pthread_join(workers[i], NULL);
    free(workers);
    workers = NULL;
    nworkers = 0;
}
