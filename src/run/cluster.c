/*
 * cluster.c - several nodes on one shared store (PostgreSQL).
 *
 * Every node hears every committed event, queued run and cancel through the store's listener
 * (LISTEN/NOTIFY): one listening connection per node, never a polling loop per stream. A client
 * may ask any node for any run: the node registers the run as followed (a live entry without a
 * worker) and publishes each event another node stores, so that SSE streams and long polls wait
 * on it exactly as on a run worked here. worker.destroyed closes a followed run. A cancel asked
 * on one node reaches the node working on the run. A queued run wakes an idle worker, which
 * claims the next run by the store's fair rule (FOR UPDATE SKIP LOCKED), from any node.
 *
 * On a single-node store (SQLite) only the claim runs here (eph_cluster_take_next, the store's
 * fair choice): every live run is worked here.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "run/live.h"
#include "run/scheduler.h"
#include "run/cluster.h"

static int last_seq_cb(const struct eph_event *e, void *ctx)
{
    *(uint64_t *)ctx = e->seq;
    return 0;
}

/* The last stored event of a run (0 when none or the store failed). */
static uint64_t stored_last_seq(struct eph_service *svc, const char *run_id)
{
    uint64_t last = 0;
    svc->store->ops->events_list(svc->store, run_id, 0, 0, last_seq_cb, &last);
    return last;
}

static void on_event(const char *run_id, uint64_t seq, const char *type, void *ctx)
{
    struct eph_service *svc = ctx;
    struct eph_live *l = eph_live_get(svc->live, run_id);
    if (!l)
        return;
    eph_live_observe(l, seq, strcmp(type, "worker.destroyed") == 0);
    /* An event after the creation's of a run queued here that no worker here has: another
     * node took it (or settled it), so it no longer waits in this node's queue. */
    if (seq > 1 && !eph_live_worked_here(l) && svc->sched)
        eph_scheduler_withdraw(svc->sched, run_id);
    eph_live_put(l);
}

static void on_queued(const char *run_id, void *ctx)
{
    (void)run_id;
    eph_service_kick(ctx);
}

static void on_cancel(const char *run_id, void *ctx)
{
    struct eph_service *svc = ctx;
    struct eph_live *l = eph_live_get(svc->live, run_id);
    if (!l)
        return;
    if (eph_live_worked_here(l) && !eph_live_cancelled(l)) {
        EPH_INFO("cluster", "run %s: cancel asked on another node", run_id);
        eph_live_cancel(l);
    }
    eph_live_put(l);
}

/* After a gap in notifications, every followed run looks at the store again. */
static void resync_one(struct eph_live *l, void *ctx)
{
    struct eph_service *svc = ctx;
    if (eph_live_worked_here(l))
        return;
    struct eph_run r;
    if (svc->store->ops->run_get(svc->store, eph_live_id(l), NULL, &r))
        return;
    bool terminal = eph_run_status_terminal(r.status);
    eph_run_release(&r);
    eph_live_observe(l, stored_last_seq(svc, eph_live_id(l)), terminal);
}

static void on_resync(void *ctx)
{
    struct eph_service *svc = ctx;
    eph_live_foreach(svc->live, resync_one, svc);
    eph_service_kick(svc);
}

int eph_cluster_start(struct eph_service *svc)
{
    if (!svc->store->ops->listen)
        return 0;
    /* In the service, which outlives the store's listener (joined at close). */
    svc->listener = (struct eph_store_listener){
        .event = on_event,
        .queued = on_queued,
        .cancel = on_cancel,
        .resync = on_resync,
        .ctx = svc,
    };
    return svc->store->ops->listen(svc->store, &svc->listener);
}

struct eph_live *eph_cluster_follow(struct eph_service *svc, const char *run_id)
{
    struct eph_live *l = eph_live_get(svc->live, run_id);
    if (l || !svc->store->ops->shared)
        return l;
    struct eph_run r;
    if (svc->store->ops->run_get(svc->store, run_id, NULL, &r))
        return NULL;
    int64_t created = r.created_at_ms;
    bool terminal = eph_run_status_terminal(r.status);
    eph_run_release(&r);
    if (terminal)
        return NULL;
    int rc = eph_live_register(svc->live, run_id, created, stored_last_seq(svc, run_id));
    if (rc && rc != -EEXIST)
        return NULL;
    l = eph_live_get(svc->live, run_id);
    if (!l)
        return NULL;
    /* An event stored between the reads above and the registration was not heard: look once
     * more now that notifications reach the entry. */
    if (!eph_live_worked_here(l) && svc->store->ops->run_get(svc->store, run_id, NULL, &r) == 0) {
        terminal = eph_run_status_terminal(r.status);
        eph_run_release(&r);
        eph_live_observe(l, stored_last_seq(svc, run_id), terminal);
    }
    return l;
}

int eph_cluster_cancel(struct eph_service *svc, const char *run_id)
{
    if (!svc->store->ops->notify_cancel)
        return 0;
    return svc->store->ops->notify_cancel(svc->store, run_id);
}

int eph_cluster_take_next(struct eph_service *svc, const char *const *waiting, size_t nwaiting,
                          char *run_id, size_t idlen)
{
    if (!svc->store->ops->run_claim_next)
        return -ENOENT;
    /* The choice, the claim and the start (queued -> starting) in one statement: the worker this
     * run goes to works on it without claiming it again (worker.c, step_load). */
    int64_t now_ms = eph_clock_real_ms();
    struct eph_claim_next q = {
        .node_id = svc->node_id,
        .lease_until_ms = now_ms + (int64_t)svc->cfg->lease_seconds * 1000,
        .max_per_org = svc->cfg->max_running_per_org,
        .started_at_ms = now_ms,
        .waiting = waiting,
        .nwaiting = nwaiting,
    };
    int rc = svc->store->ops->run_claim_next(svc->store, &q, run_id, idlen);
    if (rc)
        return rc;
    struct eph_run r;
    if ((rc = svc->store->ops->run_get(svc->store, run_id, NULL, &r)))
        return rc;
    rc = eph_live_register(svc->live, run_id, r.created_at_ms, stored_last_seq(svc, run_id));
    eph_run_release(&r);
    return rc == -EEXIST ? 0 : rc;
}
