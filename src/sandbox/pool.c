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

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t need;    /* the thread waits here: room in the pool, or stop */
static pthread_cond_t changed; /* wait_full waits here */
static pthread_once_t conds_once = PTHREAD_ONCE_INIT;

static bool running; /* start..stop; guards every field below */
static bool stopping;
static pthread_t thread;
static const struct eph_sandbox_ops *pool_ops;
static struct eph_sandbox_config pool_cfg; /* strings owned */
static unsigned pool_size;
static struct eph_sandbox *ready[EPH_SANDBOX_POOL_MAX];
static unsigned nready;
static struct timespec last_take; /* CLOCK_MONOTONIC */
static struct eph_sandbox_pool_stats stats;

static void conds_init(void)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&need, &a);
    pthread_cond_init(&changed, &a);
    pthread_condattr_destroy(&a);
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
    unsigned backoff = 0;
    pthread_mutex_lock(&lock);
    for (;;) {
        while (!stopping && nready >= pool_size)
            pthread_cond_wait(&need, &lock);
        if (stopping)
            break;
        /* Not right behind a take (see REFILL_DELAY_MS); a stop ends the wait. */
        struct timespec after = last_take;
        after.tv_nsec += (long)REFILL_DELAY_MS * 1000000L;
        if (after.tv_nsec >= 1000000000L) {
            after.tv_sec++;
            after.tv_nsec -= 1000000000L;
        }
        if (pthread_cond_timedwait(&need, &lock, &after) != ETIMEDOUT)
            continue; /* woken (stop, or another take): look again */
        pthread_mutex_unlock(&lock);
        struct eph_sandbox *sb = NULL;
        int rc = pool_ops->create(&pool_cfg, &sb);
        pthread_mutex_lock(&lock);
        if (rc) {
            stats.failures++;
            backoff = backoff ? (backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2)
                              : BACKOFF_MIN_MS;
            EPH_WARN(COMPONENT, "warm pool: cannot create a sandbox (%s); again in %u ms",
                     strerror(rc < 0 ? -rc : rc), backoff);
            struct timespec until = deadline_in(backoff);
            while (!stopping && pthread_cond_timedwait(&need, &lock, &until) != ETIMEDOUT)
                ;
            continue;
        }
        backoff = 0;
        if (stopping || nready >= pool_size) {
            pthread_mutex_unlock(&lock);
            eph_sandbox_destroy(sb);
            pthread_mutex_lock(&lock);
            stats.destroyed++;
            continue;
        }
        ready[nready++] = sb;
        stats.created++;
        pthread_cond_broadcast(&changed);
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

int eph_sandbox_pool_start(const struct eph_sandbox_ops *ops, const struct eph_sandbox_config *cfg,
                           unsigned size)
{
    pthread_once(&conds_once, conds_init);
    if (size > EPH_SANDBOX_POOL_MAX || !ops || !cfg)
        return -EINVAL;
    pthread_mutex_lock(&lock);
    if (running) {
        pthread_mutex_unlock(&lock);
        return -EALREADY;
    }
    memset(&stats, 0, sizeof(stats));
    if (size == 0) {
        pthread_mutex_unlock(&lock);
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
        pthread_mutex_unlock(&lock);
        return -ENOMEM;
    }
    pool_ops = ops;
    pool_cfg = c;
    pool_size = size;
    nready = 0;
    stopping = false;
    int rc = pthread_create(&thread, NULL, pool_main, NULL);
    if (rc) {
        cfg_free(&pool_cfg);
        pool_ops = NULL;
        pool_size = 0;
        pthread_mutex_unlock(&lock);
        return -rc;
    }
    running = true;
    stats.size = size;
    pthread_mutex_unlock(&lock);
    EPH_INFO(COMPONENT, "warm pool: %u %s sandboxes", size, ops->name);
    return 0;
}

int eph_sandbox_pool_take(const struct eph_sandbox_ops *ops, const struct eph_sandbox_config *cfg,
                          struct eph_sandbox **out, bool *pooled)
{
    struct eph_sandbox *sb = NULL;
    if (pooled)
        *pooled = false;
    pthread_mutex_lock(&lock);
    if (running && !stopping && ops == pool_ops && cfg_eq(cfg, &pool_cfg) && nready > 0) {
        sb = ready[--nready];
        ready[nready] = NULL;
        stats.taken++;
        clock_gettime(CLOCK_MONOTONIC, &last_take);
        pthread_cond_signal(&need);
    } else {
        stats.fallbacks++;
    }
    pthread_mutex_unlock(&lock);
    if (sb) {
        *out = sb;
        if (pooled)
            *pooled = true;
        return 0;
    }
    return ops->create(cfg, out);
}

void eph_sandbox_pool_stop(void)
{
    pthread_once(&conds_once, conds_init);
    pthread_mutex_lock(&lock);
    if (!running || stopping) {
        pthread_mutex_unlock(&lock);
        return;
    }
    stopping = true;
    pthread_cond_broadcast(&need);
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
    pthread_join(thread, NULL);

    pthread_mutex_lock(&lock);
    struct eph_sandbox *left[EPH_SANDBOX_POOL_MAX];
    unsigned n = nready;
    memcpy(left, ready, sizeof(left[0]) * n);
    memset(ready, 0, sizeof(ready));
    nready = 0;
    pthread_mutex_unlock(&lock);
    for (unsigned i = 0; i < n; i++)
        eph_sandbox_destroy(left[i]);

    pthread_mutex_lock(&lock);
    stats.destroyed += n;
    stats.size = 0;
    stats.ready = 0;
    cfg_free(&pool_cfg);
    pool_ops = NULL;
    pool_size = 0;
    running = false;
    stopping = false;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
}

void eph_sandbox_pool_stats(struct eph_sandbox_pool_stats *out)
{
    pthread_mutex_lock(&lock);
    *out = stats;
    out->ready = nready;
    pthread_mutex_unlock(&lock);
}

int eph_sandbox_pool_wait_full(unsigned timeout_ms)
{
    pthread_once(&conds_once, conds_init);
    struct timespec until = deadline_in(timeout_ms);
    int rc = 0;
    pthread_mutex_lock(&lock);
    while (running && !stopping && nready < pool_size) {
        if (pthread_cond_timedwait(&changed, &lock, &until) == ETIMEDOUT) {
            rc = -ETIMEDOUT;
            break;
        }
    }
    if (!rc && !(running && nready >= pool_size))
        rc = -ESRCH;
    pthread_mutex_unlock(&lock);
    return rc;
}
