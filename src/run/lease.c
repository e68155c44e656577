/*
 * lease.c - the lease keeper's pass: renews the lease of every run this node works on
 * (checkpointing its compute), stops the runs whose lease another node took over, and settles as
 * worker_lost the runs of any node whose lease expired. The scheduler calls it periodically.
 */
#include <errno.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/money.h"
#include "run/live.h"
#include "run/service.h"

unsigned eph_lease_renew_seconds(const struct eph_config *cfg)
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
    uint64_t took_ms = (eph_clock_mono_ns() - now) / 1000000u;
    if (took_ms * 4 > (uint64_t)svc->cfg->lease_seconds * 1000)
        EPH_WARN("scheduler", "run %s: renewing its lease took %llu ms (the lease is %u s)",
                 eph_live_id(l), (unsigned long long)took_ms, svc->cfg->lease_seconds);
    if (rc == -ESTALE) {
        eph_live_state(l, &last, &closed);
        if (!closed && eph_live_compute_start(l)) {
            EPH_WARN("scheduler", "run %s: lease lost (settled by another node); stopping it",
                     eph_live_id(l));
            eph_live_lease_lost(l);
        }
    } else if (rc) {
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
    /* A run this process still works on is renewed, not reaped (a late keeper pass); one its
     * worker could not settle (eph_live_abandon) is reaped like any other. */
    struct eph_live *l = eph_live_get(rp->svc->live, r->id);
    if (l) {
        bool ours = strcmp(r->node_id, rp->svc->node_id) == 0 && eph_live_worked_here(l);
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
    uint64_t t0 = eph_clock_mono_ns();
    eph_live_foreach(svc->live, renew_one, svc);
    uint64_t t1 = eph_clock_mono_ns();
    struct reap rp = {.svc = svc, .now_ms = eph_clock_real_ms()};
    svc->store->ops->runs_lease_expired(svc->store, rp.now_ms, reap_one, &rp);
    uint64_t t2 = eph_clock_mono_ns();
    /* A pass that takes a good part of the lease puts this node's own leases at risk. */
    if ((t2 - t0) / 1000000u * 4 > (uint64_t)svc->cfg->lease_seconds * 1000)
        EPH_WARN("scheduler", "a lease pass took %llu ms (renewals %llu ms; the lease is %u s)",
                 (unsigned long long)((t2 - t0) / 1000000u),
                 (unsigned long long)((t1 - t0) / 1000000u), svc->cfg->lease_seconds);
}
