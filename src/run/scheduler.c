/*
 * scheduler.c - the bounded worker pool: a queue of run ids and a fixed number of threads that
 * take from it, a settler thread, and the periodic thread. Runs are durable in the store; the
 * queue is what this process knows of them, rebuilt from the store at start-up. With a fair claim
 * (ops->take_next) the store decides which run a free worker takes (docs/RUN.md); without one,
 * the queue is the order (FIFO).
 *
 * One lock (s->lock) guards every field; it is never held while ops are called. claim_lock
 * serialises this process's claims (ops->take_next), and is taken before s->lock.
 */
#include "run/scheduler.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/id.h"
#include "common/log.h"

struct qitem {
    char id[EPH_RUN_ID_LEN + 1];
    struct qitem *next;
};

struct qlist {
    struct qitem *head, *tail;
    unsigned n;
};

struct eph_scheduler {
    struct eph_scheduler_ops ops;
    unsigned period_seconds;
    pthread_mutex_t lock;
    pthread_mutex_t claim_lock; /* held by the one worker claiming (ops->take_next) */
    pthread_cond_t work_cond;   /* workers: a run was queued, a kick, or stop */
    pthread_cond_t settle_cond; /* the settler: a run was handed, or stop */
    pthread_cond_t idle_cond;   /* stop: a run ended (CLOCK_MONOTONIC) */
    pthread_cond_t period_cond; /* the periodic thread: stop (CLOCK_MONOTONIC) */
    struct qlist queue, settle;
    struct qlist active; /* the runs the workers work on now (a shared store's claims too) */
    unsigned running;
    bool stopping, kicked;
    atomic_bool said_unreachable;
    pthread_t *workers;
    unsigned nworkers;
    pthread_t settler, periodic;
    bool settler_started, periodic_started;
    bool joined;
};

static void list_push(struct qlist *l, struct qitem *it)
{
    it->next = NULL;
    if (l->tail)
        l->tail->next = it;
    else
        l->head = it;
    l->tail = it;
    l->n++;
}

static struct qitem *list_pop(struct qlist *l)
{
    struct qitem *it = l->head;
    if (!it)
        return NULL;
    l->head = it->next;
    if (!l->head)
        l->tail = NULL;
    l->n--;
    return it;
}

static bool list_has(const struct qlist *l, const char *id)
{
    for (const struct qitem *it = l->head; it; it = it->next)
        if (strcmp(it->id, id) == 0)
            return true;
    return false;
}

/* Takes out of the list the item that is want, or else (want NULL) the first with id: NULL
 * when none. */
static struct qitem *list_take_item(struct qlist *l, const struct qitem *want, const char *id)
{
    struct qitem *prev = NULL;
    for (struct qitem *it = l->head; it; prev = it, it = it->next) {
        if (want ? it != want : strcmp(it->id, id) != 0)
            continue;
        if (prev)
            prev->next = it->next;
        else
            l->head = it->next;
        if (l->tail == it)
            l->tail = prev;
        l->n--;
        it->next = NULL;
        return it;
    }
    return NULL;
}

static struct qitem *list_take(struct qlist *l, const char *id)
{
    return list_take_item(l, NULL, id);
}

static void list_clear(struct qlist *l)
{
    struct qitem *it;
    while ((it = list_pop(l)))
        free(it);
}

static void deadline_in(struct timespec *ts, uint64_t ns)
{
    eph_clock_timespec(eph_clock_mono_ns() + ns, ts);
}

static void *periodic_main(void *arg)
{
    struct eph_scheduler *s = arg;
    uint64_t every = (uint64_t)s->period_seconds * 1000000000u;
    pthread_mutex_lock(&s->lock);
    while (!s->stopping) {
        struct timespec ts;
        deadline_in(&ts, every);
        while (!s->stopping && pthread_cond_timedwait(&s->period_cond, &s->lock, &ts) != ETIMEDOUT)
            ;
        if (s->stopping)
            break;
        pthread_mutex_unlock(&s->lock);
        s->ops.periodic(s->ops.ctx);
        pthread_mutex_lock(&s->lock);
        /* One idle worker looks at a shared store once per period. */
        if (s->ops.take_next) {
            s->kicked = true;
            pthread_cond_signal(&s->work_cond);
        }
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

void eph_scheduler_kick(struct eph_scheduler *s)
{
    pthread_mutex_lock(&s->lock);
    s->kicked = true;
    pthread_cond_signal(&s->work_cond);
    pthread_mutex_unlock(&s->lock);
}

/* Works on one run; s->running was counted by the caller under s->lock. */
static void run_one(struct eph_scheduler *s, const char *id)
{
    s->ops.work(s->ops.ctx, id);
    pthread_mutex_lock(&s->lock);
    s->running--;
    pthread_cond_broadcast(&s->idle_cond);
    pthread_mutex_unlock(&s->lock);
}

/* Works on a run taken out of the queue (FIFO). */
static void work_popped(struct eph_scheduler *s, struct qitem *it)
{
    run_one(s, it->id);
    pthread_mutex_lock(&s->lock);
    list_take_item(&s->active, it, it->id);
    pthread_mutex_unlock(&s->lock);
    free(it);
}

/* Takes the queue's first run not already worked on here (under s->lock, which it releases):
 * false when there is none. */
static bool pop_and_work(struct eph_scheduler *s)
{
    struct qitem *it;
    while ((it = list_pop(&s->queue)) && list_has(&s->active, it->id))
        free(it); /* a claim already handed it to another worker here */
    if (!it) {
        pthread_mutex_unlock(&s->lock);
        return false;
    }
    list_push(&s->active, it);
    s->running++;
    pthread_mutex_unlock(&s->lock);
    work_popped(s, it);
    return true;
}

/* Claims the next run by the store's fair rule and works on it: true when a run was worked on
 * (its worker then looks again at once, for the run that waits for it). */
static bool take_next(struct eph_scheduler *s)
{
    char ids[EPH_SCHEDULER_WAITING_MAX][EPH_RUN_ID_LEN + 1];
    const char *waiting[EPH_SCHEDULER_WAITING_MAX];
    size_t n = 0;
    /* One claim at a time here: a run this node just claimed leaves the queue before the next
     * claim lists the waiting runs, so two workers never claim the same one. */
    pthread_mutex_lock(&s->claim_lock);
    pthread_mutex_lock(&s->lock);
    for (const struct qitem *q = s->queue.head; q && n < EPH_SCHEDULER_WAITING_MAX; q = q->next) {
        memcpy(ids[n], q->id, sizeof(ids[n]));
        waiting[n] = ids[n];
        n++;
    }
    pthread_mutex_unlock(&s->lock);
    char id[EPH_RUN_ID_LEN + 1];
    int rc = s->ops.take_next(s->ops.ctx, waiting, n, id, sizeof(id));
    /* Without the database this node takes no run (and /healthz says so); the runs stay queued
     * for a node that can reach it. */
    if (rc == -ENOTCONN && !atomic_exchange(&s->said_unreachable, true))
        EPH_ERROR("scheduler", "the database cannot be reached: taking no runs");
    else if (rc != -ENOTCONN && atomic_exchange(&s->said_unreachable, false))
        EPH_INFO("scheduler", "the database answers again: taking runs");
    if (rc == -ENOENT || rc == -ESHUTDOWN) {
        pthread_mutex_unlock(&s->claim_lock);
        return false;
    }
    if (rc) {
        /* The store cannot choose: the runs of this node's own queue go in their order, and
         * each worker's own claim decides (as without a fair claim). */
        pthread_mutex_unlock(&s->claim_lock);
        pthread_mutex_lock(&s->lock);
        return pop_and_work(s);
    }
    /* The run may also be in this node's queue (queued here, or its creation here raced the
     * store's notice of it): it is worked once, now, so that entry goes, and a later hand-over
     * of it is ignored while it is active. */
    struct qitem *it = calloc(1, sizeof(*it));
    pthread_mutex_lock(&s->lock);
    free(list_take(&s->queue, id));
    if (it) {
        snprintf(it->id, sizeof(it->id), "%s", id);
        list_push(&s->active, it);
    }
    s->running++;
    pthread_mutex_unlock(&s->lock);
    pthread_mutex_unlock(&s->claim_lock);
    /* Another run may be waiting: let another idle worker look too. */
    eph_scheduler_kick(s);
    if (it) {
        work_popped(s, it);
    } else {
        run_one(s, id);
    }
    return true;
}

static void *worker_main(void *arg)
{
    struct eph_scheduler *s = arg;
    bool claims = s->ops.take_next != NULL;
    bool look = false;
    for (;;) {
        pthread_mutex_lock(&s->lock);
        /* With a fair claim the store holds the order and the queue is only what this node
         * knows: a worker looks when told to (a run submitted, a kick, the period) or when its
         * own run ended, never on its own (one kick, one look by one worker; a worker that
         * claims a run kicks the next). Without one, the queue is the order. */
        while (!s->stopping && !look && !(claims ? s->kicked : s->queue.head != NULL))
            pthread_cond_wait(&s->work_cond, &s->lock);
        if (s->stopping) {
            pthread_mutex_unlock(&s->lock);
            return NULL;
        }
        if (!claims) {
            pop_and_work(s);
            continue;
        }
        s->kicked = false;
        pthread_mutex_unlock(&s->lock);
        look = take_next(s);
    }
}

/* Finishes every run it is handed, also after stop was asked (they end at once). */
static void *settler_main(void *arg)
{
    struct eph_scheduler *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->settle.head && !s->stopping)
            pthread_cond_wait(&s->settle_cond, &s->lock);
        struct qitem *it = list_pop(&s->settle);
        if (!it)
            break; /* stopping, nothing left */
        s->running++;
        pthread_mutex_unlock(&s->lock);
        run_one(s, it->id);
        free(it);
        pthread_mutex_lock(&s->lock);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static int cond_init_mono(pthread_cond_t *c)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(c, &ca);
    pthread_condattr_destroy(&ca);
    return -rc;
}

static void join_all(struct eph_scheduler *s)
{
    if (s->joined)
        return;
    s->joined = true;
    pthread_mutex_lock(&s->lock);
    s->stopping = true;
    pthread_cond_broadcast(&s->work_cond);
    pthread_cond_broadcast(&s->settle_cond);
    pthread_cond_broadcast(&s->period_cond);
    pthread_mutex_unlock(&s->lock);
    if (s->periodic_started)
        pthread_join(s->periodic, NULL);
    if (s->settler_started)
        pthread_join(s->settler, NULL);
    for (unsigned i = 0; i < s->nworkers; i++)
        pthread_join(s->workers[i], NULL);
}

static void scheduler_free(struct eph_scheduler *s)
{
    list_clear(&s->queue);
    list_clear(&s->settle);
    list_clear(&s->active);
    pthread_cond_destroy(&s->work_cond);
    pthread_cond_destroy(&s->settle_cond);
    pthread_cond_destroy(&s->idle_cond);
    pthread_cond_destroy(&s->period_cond);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->claim_lock);
    free(s->workers);
    free(s);
}

int eph_scheduler_start(const struct eph_scheduler_ops *ops, unsigned workers,
                        unsigned period_seconds, struct eph_scheduler **out)
{
    *out = NULL;
    if (!ops || !ops->work)
        return -EINVAL;
    struct eph_scheduler *s = calloc(1, sizeof(*s));
    unsigned n = workers ? workers : 1;
    if (!s || !(s->workers = calloc(n, sizeof(*s->workers)))) {
        free(s);
        return -ENOMEM;
    }
    s->ops = *ops;
    s->period_seconds = period_seconds ? period_seconds : 1;
    /* A shared store may hold runs queued before this node started: one worker looks at once. */
    s->kicked = ops->take_next != NULL;
    atomic_init(&s->said_unreachable, false);
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->claim_lock, NULL);
    pthread_cond_init(&s->work_cond, NULL);
    pthread_cond_init(&s->settle_cond, NULL);
    int rc = cond_init_mono(&s->idle_cond);
    if (!rc)
        rc = cond_init_mono(&s->period_cond);
    if (rc) {
        scheduler_free(s);
        return rc;
    }
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 1u << 20);
    for (unsigned i = 0; i < n && !rc; i++) {
        rc = -pthread_create(&s->workers[i], &attr, worker_main, s);
        if (rc)
            EPH_ERROR("scheduler", "cannot start worker %u: %s", i, strerror(-rc));
        else
            s->nworkers++;
    }
    if (!rc && !(rc = -pthread_create(&s->settler, &attr, settler_main, s)))
        s->settler_started = true;
    pthread_attr_destroy(&attr);
    if (!rc && ops->periodic && !(rc = -pthread_create(&s->periodic, NULL, periodic_main, s)))
        s->periodic_started = true;
    if (rc) {
        EPH_ERROR("scheduler", "cannot start the worker pool: %s", strerror(-rc));
        join_all(s);
        scheduler_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

static int push(struct eph_scheduler *s, struct qlist *l, pthread_cond_t *c, const char *run_id)
{
    struct qitem *it = calloc(1, sizeof(*it));
    if (!it)
        return -ENOMEM;
    snprintf(it->id, sizeof(it->id), "%s", run_id);
    pthread_mutex_lock(&s->lock);
    if (s->stopping) {
        pthread_mutex_unlock(&s->lock);
        free(it);
        return -ESHUTDOWN;
    }
    if (l == &s->queue && (list_has(&s->queue, run_id) || list_has(&s->active, run_id))) {
        pthread_mutex_unlock(&s->lock);
        free(it);
        return 0;
    }
    list_push(l, it);
    if (l == &s->queue)
        s->kicked = true; /* a worker looks (with a fair claim, the store says which run) */
    pthread_cond_signal(c);
    pthread_mutex_unlock(&s->lock);
    return 0;
}

int eph_scheduler_submit(struct eph_scheduler *s, const char *run_id)
{
    /* A run already queued or worked on here is not queued again (a shared store's claim may
     * have taken it before it was handed over). */
    return push(s, &s->queue, &s->work_cond, run_id);
}

int eph_scheduler_settle(struct eph_scheduler *s, const char *run_id)
{
    return push(s, &s->settle, &s->settle_cond, run_id);
}

int eph_scheduler_withdraw(struct eph_scheduler *s, const char *run_id)
{
    pthread_mutex_lock(&s->lock);
    struct qitem *it = list_take(&s->queue, run_id);
    pthread_mutex_unlock(&s->lock);
    bool found = it != NULL;
    free(it);
    return found ? 0 : -ENOENT;
}

unsigned eph_scheduler_queue_depth(struct eph_scheduler *s)
{
    pthread_mutex_lock(&s->lock);
    unsigned n = s->queue.n;
    pthread_mutex_unlock(&s->lock);
    return n;
}

unsigned eph_scheduler_running(struct eph_scheduler *s)
{
    pthread_mutex_lock(&s->lock);
    unsigned n = s->running;
    pthread_mutex_unlock(&s->lock);
    return n;
}

void eph_scheduler_stop(struct eph_scheduler *s, unsigned grace_seconds)
{
    if (!s || s->joined)
        return;
    struct timespec deadline;
    deadline_in(&deadline, (uint64_t)grace_seconds * 1000000000u);
    pthread_mutex_lock(&s->lock);
    /* Queued runs stay queued in the store; drop them from this process's queue. */
    list_clear(&s->queue);
    while (s->running && pthread_cond_timedwait(&s->idle_cond, &s->lock, &deadline) != ETIMEDOUT)
        ;
    unsigned still = s->running;
    pthread_mutex_unlock(&s->lock);
    if (still && s->ops.cancel_all) {
        EPH_WARN("scheduler", "grace period over: cancelling %u running runs", still);
        s->ops.cancel_all(s->ops.ctx);
    }
    join_all(s);
}

void eph_scheduler_free(struct eph_scheduler *s)
{
    if (!s)
        return;
    eph_scheduler_stop(s, 0);
    scheduler_free(s);
}
