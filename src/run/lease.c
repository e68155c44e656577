/*
 * lease.c - the lease keeper's pass: renews the lease of every run this node works on
 * (checkpointing its compute, and moving each run's fence on), stops the runs whose lease another
 * node took over, and settles as worker_lost the runs of any node whose lease expired - but only
 * once this node has itself been in contact with the store for a whole lease, so that time the
 * store was away (or this node was stopped) never counts against anyone's lease. The scheduler
 * calls it periodically. docs/RUN.md, "Leases" and "Fencing".
 */
#include <errno.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/money.h"
#include "run/live.h"
#include "run/lease.h"
#include "run/worker.h"

struct renew {
    struct eph_service *svc;
    int failed; /* the first error of a renewal this pass (not -ESTALE), or 0 */
};

static void renew_one(struct eph_live *l, void *ctx)
{
    struct renew *rn = ctx;
    struct eph_service *svc = rn->svc;
    uint64_t last;
    bool closed;
    eph_live_state(l, &last, &closed);
    /* Only runs this node holds have a lease here: not the ones waiting in its queue, nor the
     * ones it follows for another node. */
    if (closed || !eph_live_worked_here(l) || eph_live_is_lease_lost(l))
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
    if (rc == 0) {
        /* Measured from before the renewal was sent (the lease it wrote ends a whole lease after
         * that), never from when it came back. */
        if (svc->store->ops->shared)
            eph_live_set_fence(l, now + eph_lease_fence_span_ns(svc->cfg));
    } else if (rc == -ESTALE) {
        eph_live_state(l, &last, &closed);
        if (!closed && eph_live_first_loss_notice(l))
            EPH_WARN("scheduler", "run %s: lease lost (settled by another node); stopping it",
                     eph_live_id(l));
        eph_live_lease_lost(l);
    } else if (!rn->failed) {
        rn->failed = rc;
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

/* Whether this node has been in contact with the store, pass after pass, for a whole lease: a
 * pass that failed, took longer than the renewal interval (its store calls were retrying) or came
 * late (the process was stopped, or its keeper blocked) starts the count again. */
static bool contact_for_a_lease(struct eph_service *svc, uint64_t t0, uint64_t t1, int failed)
{
    struct eph_lease_keeper *k = &svc->keeper;
    uint64_t renew = (uint64_t)eph_lease_renew_seconds(svc->cfg) * 1000000000u;
    bool late = k->last_ok_ns && t0 - k->last_ok_ns > 2 * renew;
    if (failed) {
        if (!k->failing)
            EPH_WARN("scheduler",
                     "cannot renew this node's leases: %s (said once until they "
                     "are renewed again)",
                     eph_strerror(failed));
        k->failing = true;
        k->contact_since_ns = 0;
        return false;
    }
    if (k->failing)
        EPH_INFO("scheduler", "this node's leases are renewed again");
    k->failing = false;
    if (!k->contact_since_ns || late || t1 - t0 > renew) {
        if (k->last_ok_ns && !k->waiting)
            EPH_INFO("scheduler",
                     "out of contact with the store for a while: no lease is "
                     "called expired before %u s of contact again",
                     svc->cfg->lease_seconds);
        k->waiting = k->last_ok_ns != 0;
        k->contact_since_ns = t1;
    }
    k->last_ok_ns = t1;
    if (t1 - k->contact_since_ns < eph_lease_ns(svc->cfg))
        return false;
    k->waiting = false;
    return true;
}

void eph_lease_pass(struct eph_service *svc)
{
    uint64_t t0 = eph_clock_mono_ns();
    /* This node's own leases first: after an outage they are renewed before anyone's are
     * judged. */
    struct renew rn = {.svc = svc};
    eph_live_foreach(svc->live, renew_one, &rn);
    uint64_t t1 = eph_clock_mono_ns();
    if (contact_for_a_lease(svc, t0, t1, rn.failed)) {
        struct reap rp = {.svc = svc, .now_ms = eph_clock_real_ms()};
        int rc = svc->store->ops->runs_lease_expired(svc->store, rp.now_ms, reap_one, &rp);
        if (rc)
            svc->keeper.contact_since_ns = 0;
    }
    uint64_t t2 = eph_clock_mono_ns();
    /* A pass that takes a good part of the lease puts this node's own leases at risk. */
    if ((t2 - t0) / 1000000u * 4 > (uint64_t)svc->cfg->lease_seconds * 1000)
        EPH_WARN("scheduler", "a lease pass took %llu ms (renewals %llu ms; the lease is %u s)",
                 (unsigned long long)((t2 - t0) / 1000000u),
                 (unsigned long long)((t1 - t0) / 1000000u), svc->cfg->lease_seconds);
}
