/*
 * pool.c - the warm pool of pre-created sandboxes (pool.h says what it promises).
 *
 * State, all under one mutex: the configuration the pool was started with (copied), a stack of
 * ready sandboxes, and the creating thread's stop flag. The thread creates outside the lock (a
 * create takes milliseconds) and pushes the result; take pops under the lock, so a sandbox leaves
 * the pool exactly once, and the pool never sees it again: nothing puts one back.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "sandbox/pool.h"

#define COMPONENT "sandbox"
#define BACKOFF_MIN_MS 100u
#define BACKOFF_MAX_MS 10000u
/* A refill waits this long after a take, so that it does not compete for the CPU with the first
 * steps of the run that just took a sandbox (on a 2-CPU host a concurrent create made that run's
 * first command 2-3 ms slower). The first thing a run does is usually a model call anyway. */
#define REFILL_DELAY_MS 20u

/* One pool; the server's is a member of its service object (run/service.h). */
struct eph_sandbox_pool {
    pthread_mutex_t lock;
    pthread_cond_t need;    /* the thread waits here: room in the pool, or stop */
    pthread_cond_t changed; /* wait_full waits here */

    bool running; /* start..stop; guards every field below */
    bool stopping;
    pthread_t thread;
    const struct eph_sandbox_ops *ops;
    struct eph_sandbox_config cfg; /* strings owned */
    unsigned size;
    struct eph_sandbox *ready[EPH_SANDBOX_POOL_MAX];
    unsigned nready;
    struct timespec last_take; /* CLOCK_MONOTONIC */
    struct eph_sandbox_pool_stats stats;
};

int eph_sandbox_pool_new(struct eph_sandbox_pool **out)
{
    *out = NULL;
    struct eph_sandbox_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&p->need, &a);
    pthread_cond_init(&p->changed, &a);
    pthread_condattr_destroy(&a);
    pthread_mutex_init(&p->lock, NULL);
    *out = p;
    return 0;
}

void eph_sandbox_pool_free(struct eph_sandbox_pool *p)
{
    if (!p)
        return;
    eph_sandbox_pool_stop(p);
    pthread_cond_destroy(&p->need);
    pthread_cond_destroy(&p->changed);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

static struct timespec deadline_in(unsigned ms)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += ms / 1000u;
    t.tv_nsec += (long)(ms % 1000u) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

static bool str_eq(const char *a, const char *b)
{
    if (!a || !b)
        return a == b;
    return strcmp(a, b) == 0;
}

static bool cfg_eq(const struct eph_sandbox_config *a, const struct eph_sandbox_config *b)
{
    const struct eph_sandbox_limits *x = &a->limits, *y = &b->limits;
    return str_eq(a->backend, b->backend) && str_eq(a->image, b->image) &&
           str_eq(a->init_path, b->init_path) && str_eq(a->owner_tag, b->owner_tag) &&
           x->vcpus == y->vcpus && x->memory_mib == y->memory_mib && x->pids == y->pids &&
           x->disk_mib == y->disk_mib && x->nofile == y->nofile && x->fsize_bytes == y->fsize_bytes;
}

static char *dup_or_null(const char *s, bool *ok)
{
    if (!s)
        return NULL;
    char *d = strdup(s);
    if (!d)
        *ok = false;
    return d;
}

static void cfg_free(struct eph_sandbox_config *c)
{
    free((char *)c->backend);
    free((char *)c->image);
    free((char *)c->init_path);
    free((char *)c->owner_tag);
    memset(c, 0, sizeof(*c));
}

/* The creating thread. Every sandbox it makes is pushed once or destroyed here. */
static void *pool_main(void *arg)
{
    struct eph_sandbox_pool *p = arg;
    unsigned backoff = 0;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->stopping && p->nready >= p->size)
            pthread_cond_wait(&p->need, &p->lock);
        if (p->stopping)
            break;
        /* Not right behind a take (see REFILL_DELAY_MS); a stop ends the wait. */
        struct timespec after = p->last_take;
        after.tv_nsec += (long)REFILL_DELAY_MS * 1000000L;
        if (after.tv_nsec >= 1000000000L) {
            after.tv_sec++;
            after.tv_nsec -= 1000000000L;
        }
        if (pthread_cond_timedwait(&p->need, &p->lock, &after) != ETIMEDOUT)
            continue; /* woken (stop, or another take): look again */
        pthread_mutex_unlock(&p->lock);
        struct eph_sandbox *sb = NULL;
        int rc = p->ops->create(&p->cfg, &sb);
        pthread_mutex_lock(&p->lock);
        if (rc) {
            p->stats.failures++;
            backoff = backoff ? (backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2)
                              : BACKOFF_MIN_MS;
            EPH_WARN(COMPONENT, "warm pool: cannot create a sandbox (%s); again in %u ms",
                     strerror(rc < 0 ? -rc : rc), backoff);
            struct timespec until = deadline_in(backoff);
            while (!p->stopping && pthread_cond_timedwait(&p->need, &p->lock, &until) != ETIMEDOUT)
                ;
            continue;
        }
        backoff = 0;
        if (p->stopping || p->nready >= p->size) {
            pthread_mutex_unlock(&p->lock);
            eph_sandbox_destroy(sb);
            pthread_mutex_lock(&p->lock);
            p->stats.destroyed++;
            continue;
        }
        p->ready[p->nready++] = sb;
        p->stats.created++;
        pthread_cond_broadcast(&p->changed);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

int eph_sandbox_pool_start(struct eph_sandbox_pool *p, const struct eph_sandbox_ops *ops,
                           const struct eph_sandbox_config *cfg, unsigned size)
{
    if (size > EPH_SANDBOX_POOL_MAX || !ops || !cfg)
        return -EINVAL;
    pthread_mutex_lock(&p->lock);
    if (p->running) {
        pthread_mutex_unlock(&p->lock);
        return -EALREADY;
    }
    memset(&p->stats, 0, sizeof(p->stats));
    if (size == 0) {
        pthread_mutex_unlock(&p->lock);
        return 0;
    }
    bool ok = true;
    struct eph_sandbox_config c = *cfg;
    c.backend = dup_or_null(cfg->backend, &ok);
    c.image = dup_or_null(cfg->image, &ok);
    c.init_path = dup_or_null(cfg->init_path, &ok);
    c.owner_tag = dup_or_null(cfg->owner_tag, &ok);
    if (!ok) {
        cfg_free(&c);
        pthread_mutex_unlock(&p->lock);
        return -ENOMEM;
    }
    p->ops = ops;
    p->cfg = c;
    p->size = size;
    p->nready = 0;
    p->stopping = false;
    int rc = pthread_create(&p->thread, NULL, pool_main, p);
    if (rc) {
        cfg_free(&p->cfg);
        p->ops = NULL;
        p->size = 0;
        pthread_mutex_unlock(&p->lock);
        return -rc;
    }
    p->running = true;
    p->stats.size = size;
    pthread_mutex_unlock(&p->lock);
    EPH_INFO(COMPONENT, "warm pool: %u %s sandboxes", size, ops->name);
    return 0;
}

int eph_sandbox_pool_take(struct eph_sandbox_pool *p, const struct eph_sandbox_ops *ops,
                          const struct eph_sandbox_config *cfg, struct eph_sandbox **out,
                          bool *pooled)
{
    struct eph_sandbox *sb = NULL;
    if (pooled)
        *pooled = false;
    if (!p)
        return ops->create(cfg, out);
    pthread_mutex_lock(&p->lock);
    if (p->running && !p->stopping && ops == p->ops && cfg_eq(cfg, &p->cfg) && p->nready > 0) {
        sb = p->ready[--p->nready];
        p->ready[p->nready] = NULL;
        p->stats.taken++;
        clock_gettime(CLOCK_MONOTONIC, &p->last_take);
        pthread_cond_signal(&p->need);
    } else {
        p->stats.fallbacks++;
    }
    pthread_mutex_unlock(&p->lock);
    if (sb) {
        *out = sb;
        if (pooled)
            *pooled = true;
        return 0;
    }
    return ops->create(cfg, out);
}

void eph_sandbox_pool_stop(struct eph_sandbox_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    if (!p->running || p->stopping) {
        pthread_mutex_unlock(&p->lock);
        return;
    }
    p->stopping = true;
    pthread_cond_broadcast(&p->need);
    pthread_cond_broadcast(&p->changed);
    pthread_mutex_unlock(&p->lock);
    pthread_join(p->thread, NULL);

    pthread_mutex_lock(&p->lock);
    struct eph_sandbox *left[EPH_SANDBOX_POOL_MAX];
    unsigned n = p->nready;
    memcpy(left, p->ready, sizeof(left[0]) * n);
    memset(p->ready, 0, sizeof(p->ready));
    p->nready = 0;
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; i < n; i++)
        eph_sandbox_destroy(left[i]);

    pthread_mutex_lock(&p->lock);
    p->stats.destroyed += n;
    p->stats.size = 0;
    p->stats.ready = 0;
    cfg_free(&p->cfg);
    p->ops = NULL;
    p->size = 0;
    p->running = false;
    p->stopping = false;
    pthread_cond_broadcast(&p->changed);
    pthread_mutex_unlock(&p->lock);
}

void eph_sandbox_pool_stats(struct eph_sandbox_pool *p, struct eph_sandbox_pool_stats *out)
{
    pthread_mutex_lock(&p->lock);
    *out = p->stats;
    out->ready = p->nready;
    pthread_mutex_unlock(&p->lock);
}

int eph_sandbox_pool_wait_full(struct eph_sandbox_pool *p, unsigned timeout_ms)
{
    struct timespec until = deadline_in(timeout_ms);
    int rc = 0;
    pthread_mutex_lock(&p->lock);
    while (p->running && !p->stopping && p->nready < p->size) {
        if (pthread_cond_timedwait(&p->changed, &p->lock, &until) == ETIMEDOUT) {
            rc = -ETIMEDOUT;
            break;
        }
    }
    if (!rc && !(p->running && p->nready >= p->size))
        rc = -ESRCH;
    pthread_mutex_unlock(&p->lock);
    return rc;
}
