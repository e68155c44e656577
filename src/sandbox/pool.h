/*
 * pool.h - a few sandboxes built ahead of time, so that a run starts on a machine that is already
 * up (config `sandbox.warm_pool`; by default 2 on the namespaces backend, none on the others).
 *
 * One dedicated thread creates them and lives as long as the pool: a namespaces sandbox's init has
 * PR_SET_PDEATHSIG set, which follows the *thread* that cloned it, so where the process has no
 * launcher (sandbox.h) a creating thread that ended would kill every sandbox it made, idle or in
 * use. The server's pool is a member of its service
 * object; a test or a benchmark makes its own with eph_sandbox_pool_new().
 *
 * A pooled sandbox is a fresh machine exactly as create() makes it: nothing has run in it. Take
 * moves it out of the pool, and there is no call that puts one back: a sandbox serves at most one
 * run, and the caller destroys it (eph_sandbox_destroy) as it would a fresh one. Take refills in
 * the background; when the pool is empty, stopped, disabled, or was built for another
 * configuration, take creates a fresh sandbox in the calling thread instead, so it always behaves
 * like ops->create().
 *
 * Order at shutdown: stop the pool only after every taken sandbox has been destroyed (after the
 * workers are joined): stop ends the creating thread, whose death kills what it created.
 */
#ifndef EPH_SANDBOX_POOL_H
#define EPH_SANDBOX_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "sandbox/sandbox.h"

#define EPH_SANDBOX_POOL_MAX 64u

struct eph_sandbox_pool;

/* An empty, stopped pool (0 or -ENOMEM); free stops it first. */
int eph_sandbox_pool_new(struct eph_sandbox_pool **out) __attribute__((warn_unused_result));
void eph_sandbox_pool_free(struct eph_sandbox_pool *p);

/* Starts the creating thread, which fills the pool with size sandboxes of (ops, cfg); cfg and its
 * strings are copied. size 0: no pool, take always creates. Returns 0, -EALREADY when a pool is
 * running, -EINVAL when size > EPH_SANDBOX_POOL_MAX, or a negative errno. Creation failures are
 * logged and retried with a backoff: they never fail a take, which then creates (and reports). */
int eph_sandbox_pool_start(struct eph_sandbox_pool *p, const struct eph_sandbox_ops *ops,
                           const struct eph_sandbox_config *cfg, unsigned size);

/* A sandbox of (ops, cfg) owned by the caller: a pooled one when the pool was started with the
 * same ops and an equal cfg and has one ready, else ops->create(cfg, out). *pooled (may be NULL)
 * says which, so the caller bills compute from the take for a pooled one and from the start of
 * creation for a fresh one. Thread-safe; each sandbox is handed out once. Returns what create
 * would. A NULL pool always creates. */
int eph_sandbox_pool_take(struct eph_sandbox_pool *p, const struct eph_sandbox_ops *ops,
                          const struct eph_sandbox_config *cfg, struct eph_sandbox **out,
                          bool *pooled);

/* Stops refilling, joins the creating thread (waiting for a create in progress) and destroys every
 * sandbox still in the pool. Idempotent; the pool can be started again afterwards. */
void eph_sandbox_pool_stop(struct eph_sandbox_pool *p);

struct eph_sandbox_pool_stats {
    unsigned size;      /* the configured size (0 when stopped) */
    unsigned ready;     /* sandboxes waiting in the pool now */
    uint64_t created;   /* by the pool's thread, since start */
    uint64_t taken;     /* handed out from the pool */
    uint64_t fallbacks; /* takes that created a fresh sandbox instead */
    uint64_t failures;  /* creates by the pool's thread that failed */
    uint64_t destroyed; /* idle ones destroyed by stop */
};
void eph_sandbox_pool_stats(struct eph_sandbox_pool *p, struct eph_sandbox_pool_stats *out);

/* Blocks until ready == size, the pool is stopped, or timeout_ms passes; 0 when full. For start-up
 * and tests. */
int eph_sandbox_pool_wait_full(struct eph_sandbox_pool *p, unsigned timeout_ms);

#endif
