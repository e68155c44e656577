/*
 * sqlite_runs.c - the SQLite store's runs: insert with the reservation and the queue cap, reads,
 * progress, settlement, leases, fair claims, retention, and their events.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "common/log.h"
#include "store/run_row.h"
#include "store/sqlite_store.h"
#include "store/store.h"

static int sq_count_queued_locked(struct sq_conn *s, const char *org_id, unsigned *out)
{
    sqlite3_stmt *st;
    int rc = sq_prepare(s, "SELECT COUNT(*) FROM runs WHERE org_id = ? AND status = 'queued'", &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
    int r = sqlite3_step(st);
    if (r == SQLITE_ROW)
        *out = (unsigned)sqlite3_column_int64(st, 0);
    else
        rc = sq_db_err(s, r, "count queued");
    sq_done(st);
    return rc;
}

int sq_runs_count_queued(struct eph_store *base, const char *org_id, unsigned *out)
{
    struct sq_conn *s = READER(base);
    pthread_mutex_lock(&s->lock);
    int rc = sq_count_queued_locked(s, org_id, out);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sq_runs_count_by_status(struct eph_store *base, eph_status_count_cb cb, void *ctx)
{
    struct sq_conn *s = READER(base);
    struct {
        char status[24];
        uint64_t n;
    } rows[16];
    memset(rows, 0, sizeof(rows));
    size_t n = 0;
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = sq_prepare(
        s, "SELECT status, COUNT(*) FROM runs WHERE kind = 'run' GROUP BY status ORDER BY status",
        &st);
    if (!rc) {
        int r;
        while ((r = sqlite3_step(st)) == SQLITE_ROW && n < sizeof(rows) / sizeof(rows[0])) {
            snprintf(rows[n].status, sizeof(rows[n].status), "%s", sqlite3_column_text(st, 0));
            rows[n].n = (uint64_t)sqlite3_column_int64(st, 1);
            n++;
        }
        if (r != SQLITE_DONE && r != SQLITE_ROW)
            rc = sq_db_err(s, r, "count by status");
        sq_done(st);
    }
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < n && !rc; i++)
        rc = cb(rows[i].status, rows[i].n, ctx);
    return rc;
}

static int sq_event_insert_locked(struct sq_conn *s, const char *run_id, const struct eph_event *e)
{
    sqlite3_stmt *st;
    int rc =
        sq_prepare(s,
                   "INSERT INTO events (run_id, seq, t_ms, at_ms, source, type, message, data, "
                   "wire) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, run_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)e->seq);
    sqlite3_bind_int64(st, 3, e->t_ms);
    sqlite3_bind_int64(st, 4, e->at_ms);
    sqlite3_bind_text(st, 5, e->source, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 6, e->type, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 7, e->message ? e->message : "", -1, SQLITE_TRANSIENT);
    /* With its wire text, data is in it already: not stored twice (store.h). */
    if (e->data && !e->wire)
        sq_bind_json(st, 8, e->data);
    else
        sqlite3_bind_text(st, 8, "{}", -1, SQLITE_STATIC);
    if (e->wire)
        sqlite3_bind_text(st, 9, e->wire, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, 9);
    return sq_step_done(s, st, "event insert");
}

int sq_run_insert_capped(struct eph_store *base, const struct eph_run *r,
                         const struct eph_event *first, unsigned max_queued)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    int rc = sq_begin(s);
    if (rc)
        goto out;
    if (max_queued) {
        unsigned queued = 0;
        if ((rc = sq_count_queued_locked(s, r->org_id, &queued)))
            goto fail;
        if (queued >= max_queued) {
            rc = -EAGAIN;
            goto fail;
        }
    }
    struct eph_balance b;
    if ((rc = sq_balance_locked(s, r->org_id, &b)))
        goto fail;
    if (b.available_micros < r->cost.reserved_micros) {
        rc = -EDQUOT;
        goto fail;
    }
    sqlite3_stmt *st;
    rc =
        sq_prepare(s,
                   "INSERT INTO runs (id, org_id, status, model, prompt, files, connections, "
                   "metadata, shell, web, zdr, timeout_seconds, created_at, reserved_micros, "
                   "node_id, lease_expires_at, web_allow, replay_of, image, image_digest, outputs, "
                   "kind, idle_timeout_seconds) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   &st);
    if (rc)
        goto fail;
    sqlite3_bind_text(st, 1, r->id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, r->org_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, eph_run_status_name(r->status), -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, r->model, -1, SQLITE_TRANSIENT);
    sq_bind_text(st, 5, r->prompt);
    sq_bind_json(st, 6, r->files);
    if (r->connections)
        sq_bind_json(st, 7, r->connections);
    else
        sqlite3_bind_text(st, 7, "[]", -1, SQLITE_STATIC);
    if (r->metadata)
        sq_bind_json(st, 8, r->metadata);
    else
        sqlite3_bind_text(st, 8, "{}", -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 9, r->shell);
    sqlite3_bind_int(st, 10, r->web);
    sqlite3_bind_int(st, 11, r->zdr);
    sqlite3_bind_int(st, 12, (int)r->timeout_seconds);
    sqlite3_bind_int64(st, 13, r->created_at_ms);
    sqlite3_bind_int64(st, 14, r->cost.reserved_micros);
    sq_bind_text(st, 15, r->node_id[0] ? r->node_id : NULL);
    sq_bind_ms(st, 16, r->lease_expires_at_ms);
    sq_bind_json(st, 17, r->web_allow);
    sq_bind_text(st, 18, r->replay_of);
    sqlite3_bind_text(st, 19, r->image[0] ? r->image : "default", -1, SQLITE_TRANSIENT);
    sq_bind_text(st, 20, r->image_digest[0] ? r->image_digest : NULL);
    sq_bind_json(st, 21, r->outputs);
    sqlite3_bind_text(st, 22, eph_run_kind_name(r->kind), -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 23, (int)r->idle_timeout_seconds);
    if ((rc = sq_step_done(s, st, "run insert")))
        goto fail;
    if ((rc = sq_insert_ledger(s, r->org_id, r->id, "reserve", r->cost.reserved_micros,
                               r->created_at_ms)))
        goto fail;
    if (first && (rc = sq_event_insert_locked(s, r->id, first)))
        goto fail;
    rc = sq_commit(s);
    if (rc)
        goto fail;
    goto out;
fail:
    sq_rollback(s);
out:
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sq_run_insert(struct eph_store *base, const struct eph_run *r, const struct eph_event *first)
{
    return sq_run_insert_capped(base, r, first, 0);
}

static const char *sq_row_text(const struct eph_row *row, int col)
{
    return (const char *)sqlite3_column_text((sqlite3_stmt *)row->impl, col);
}

static int64_t sq_row_i64(const struct eph_row *row, int col)
{
    return sqlite3_column_int64((sqlite3_stmt *)row->impl, col);
}

static int row_to_run(sqlite3_stmt *st, struct eph_run *r)
{
    const struct eph_row row = {.impl = st, .text = sq_row_text, .i64 = sq_row_i64};
    return eph_run_from_row(&row, r);
}

int sq_run_get(struct eph_store *base, const char *id, const char *org_id, struct eph_run *out)
{
    struct sq_conn *s = READER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = sq_prepare(s, "SELECT " EPH_RUN_COLUMNS " FROM runs WHERE id = ?", &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
        int r = sqlite3_step(st);
        if (r == SQLITE_ROW) {
            /* Another org's run is indistinguishable from no run at all. */
            if (org_id && strcmp((const char *)sqlite3_column_text(st, 1), org_id) != 0)
                rc = -ENOENT;
            else
                rc = row_to_run(st, out);
        } else {
            rc = r == SQLITE_DONE ? -ENOENT : sq_db_err(s, r, "run get");
        }
        sq_done(st);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* Runs the rows of a prepared SELECT EPH_RUN_COLUMNS through cb, at most limit (0 = all). Called
 * and returns with the lock held; the callback runs with it released. */
static int each_run(struct sq_conn *s, sqlite3_stmt *st, unsigned limit, eph_run_cb cb, void *ctx,
                    bool *has_more)
{
    /* Collect first: callbacks may call back into the store. */
    struct eph_run *rows = NULL;
    size_t n = 0, cap = 0;
    int rc = 0, r;
    if (has_more)
        *has_more = false;
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
        if (limit && n == limit) {
            if (has_more)
                *has_more = true;
            break;
        }
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            struct eph_run *p = realloc(rows, ncap * sizeof(*rows));
            if (!p) {
                rc = -ENOMEM;
                break;
            }
            rows = p;
            cap = ncap;
        }
        rc = row_to_run(st, &rows[n]);
        if (rc)
            break;
        n++;
    }
    if (!rc && r != SQLITE_ROW && r != SQLITE_DONE)
        rc = sq_db_err(s, r, "run list");
    sq_done(st);
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < n; i++) {
        if (!rc)
            rc = cb(&rows[i], ctx);
        eph_run_release(&rows[i]);
    }
    free(rows);
    pthread_mutex_lock(&s->lock);
    return rc;
}

int sq_run_list(struct eph_store *base, const char *org_id, unsigned limit, const char *after,
                const char *status, const json_t *metadata, enum eph_run_kind kind, eph_run_cb cb,
                void *ctx, bool *has_more)
{
    struct sq_conn *s = READER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = sq_prepare(s,
                        "SELECT " EPH_RUN_COLUMNS " FROM runs WHERE org_id = ?1 AND kind = ?6"
                        " AND (?2 IS NULL OR status = ?2)"
                        " AND (?3 IS NULL OR (created_at, rowid) < "
                        "  (SELECT created_at, rowid FROM runs WHERE id = ?3 AND org_id = ?1))"
                        /* every filter pair is one of the run's metadata pairs */
                        " AND (?5 IS NULL OR NOT EXISTS (SELECT 1 FROM json_each(?5) f"
                        "  WHERE NOT EXISTS (SELECT 1 FROM json_each(runs.metadata) m"
                        "   WHERE m.key = f.key AND m.type = 'text' AND m.value = f.value)))"
                        " ORDER BY created_at DESC, rowid DESC LIMIT ?4",
                        &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
        sq_bind_text(st, 2, status);
        sq_bind_text(st, 3, after);
        sqlite3_bind_int(st, 4, (int)limit + 1);
        if (metadata)
            sq_bind_json(st, 5, metadata);
        sqlite3_bind_text(st, 6, eph_run_kind_name(kind), -1, SQLITE_STATIC);
        rc = each_run(s, st, limit, cb, ctx, has_more);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sq_runs_in_state(struct eph_store *base, enum eph_run_status state, eph_run_cb cb, void *ctx)
{
    struct sq_conn *s = READER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = sq_prepare(
        s, "SELECT " EPH_RUN_COLUMNS " FROM runs WHERE status = ? ORDER BY created_at", &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, eph_run_status_name(state), -1, SQLITE_STATIC);
        rc = each_run(s, st, 0, cb, ctx, NULL);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* The run's non-terminal state; -EALREADY when it is finished. Under the writer's lock. */
static int run_state_locked(struct sq_conn *s, const struct eph_run *r)
{
    sqlite3_stmt *st;
    int rc =
        sq_prepare(s,
                   "UPDATE runs SET status = ?, started_at = ?, sandbox_backend = ?, vcpus = ?, "
                   "memory_mib = ? WHERE id = ? AND status NOT IN ('completed', 'failed', "
                   "'timed_out', 'budget_exhausted', 'cancelled')",
                   &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, eph_run_status_name(r->status), -1, SQLITE_STATIC);
    sq_bind_ms(st, 2, r->started_at_ms);
    sq_bind_text(st, 3, r->sandbox_backend);
    sqlite3_bind_int(st, 4, (int)r->vcpus);
    sqlite3_bind_int(st, 5, (int)r->memory_mib);
    sqlite3_bind_text(st, 6, r->id, -1, SQLITE_TRANSIENT);
    rc = sq_step_done(s, st, "run update");
    if (!rc && sqlite3_changes(s->db) == 0)
        rc = -EALREADY;
    return rc;
}

static void bind_usage_cost(sqlite3_stmt *st, int i, const struct eph_run *r)
{
    sqlite3_bind_int64(st, i++, (sqlite3_int64)r->usage.model_calls);
    sqlite3_bind_int64(st, i++, (sqlite3_int64)r->usage.input_tokens);
    sqlite3_bind_int64(st, i++, (sqlite3_int64)r->usage.output_tokens);
    sqlite3_bind_int64(st, i++, (sqlite3_int64)r->usage.shell_commands);
    sqlite3_bind_int64(st, i++, (sqlite3_int64)r->usage.web_requests);
    sqlite3_bind_int64(st, i++, (sqlite3_int64)r->usage.connection_requests);
    sqlite3_bind_int64(st, i++, r->cost.model_micros);
    sqlite3_bind_int64(st, i++, r->cost.web_micros);
    sqlite3_bind_int64(st, i, r->cost.compute_micros);
}

/* The run's usage and cost so far (nothing once it is finished). Under the writer's lock. */
static int run_progress_locked(struct sq_conn *s, const struct eph_run *r)
{
    sqlite3_stmt *st;
    int rc =
        sq_prepare(s,
                   "UPDATE runs SET model_calls = ?, input_tokens = ?, output_tokens = ?, "
                   "shell_commands = ?, web_requests = ?, connection_requests = ?, "
                   "model_micros = ?, web_micros = ?, compute_micros = ?, model_attempts = ?11 "
                   "WHERE id = ?10 AND status IN ('queued', 'starting', 'running')",
                   &st);
    if (rc)
        return rc;
    bind_usage_cost(st, 1, r);
    sqlite3_bind_text(st, 10, r->id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 11, (sqlite3_int64)r->usage.model_attempts);
    return sq_step_done(s, st, "run progress");
}

int sq_run_update(struct eph_store *base, const struct eph_run *r)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    int rc = run_state_locked(s, r);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sq_run_progress(struct eph_store *base, const struct eph_run *r)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    int rc = run_progress_locked(s, r);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sq_run_step(struct eph_store *base, const struct eph_run *r, unsigned what,
                const struct eph_event *events, size_t n)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    int rc = sq_begin(s);
    if (rc) {
        pthread_mutex_unlock(&s->lock);
        return rc;
    }
    if (what & EPH_STEP_STATE)
        rc = run_state_locked(s, r);
    if (!rc && (what & EPH_STEP_PROGRESS))
        rc = run_progress_locked(s, r);
    for (size_t i = 0; !rc && i < n; i++)
        rc = sq_event_insert_locked(s, r->id, &events[i]);
    if (!rc)
        rc = sq_commit(s);
    else
        sq_rollback(s);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sq_run_finish(struct eph_store *base, const struct eph_run_final *f)
{
    struct sq_conn *s = WRITER(base);
    const struct eph_run *r = f->run;
    if (!eph_run_status_terminal(r->status))
        return -EINVAL;
    if (r->cost.charged_micros < 0 || r->cost.released_micros < 0 ||
        r->cost.charged_micros + r->cost.released_micros != r->cost.reserved_micros ||
        r->cost.charged_micros !=
            r->cost.model_micros + r->cost.web_micros + r->cost.compute_micros)
        EPH_BUG("run %s settles unbalanced: charged %lld released %lld reserved %lld", r->id,
                (long long)r->cost.charged_micros, (long long)r->cost.released_micros,
                (long long)r->cost.reserved_micros);
    pthread_mutex_lock(&s->lock);
    int rc = sq_begin(s);
    if (rc)
        goto out;
    sqlite3_stmt *st;
    rc =
        sq_prepare(s,
                   "UPDATE runs SET status = ?, finished_at = ?, result = ?, error_type = ?, "
                   "error_code = ?, error_message = ?, model_calls = ?, input_tokens = ?, "
                   "output_tokens = ?, shell_commands = ?, web_requests = ?, "
                   "connection_requests = ?, model_micros = ?, web_micros = ?, compute_micros = ?, "
                   "charged_micros = ?, released_micros = ?, log_expires_at = ?, "
                   "started_at = COALESCE(started_at, ?), "
                   "sandbox_backend = COALESCE(?, sandbox_backend), divergences = ?23, "
                   "model_attempts = ?24 "
                   "WHERE id = ?21 AND status IN ('queued', 'starting', 'running') "
                   "AND (?22 = 0 OR lease_expires_at < ?22)",
                   &st);
    if (rc)
        goto fail;
    sqlite3_bind_text(st, 1, eph_run_status_name(r->status), -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, r->finished_at_ms);
    sq_bind_text(st, 3, r->zdr ? NULL : r->result);
    sq_bind_text(st, 4, r->error_type);
    sq_bind_text(st, 5, r->error_code);
    sq_bind_text(st, 6, r->error_message);
    bind_usage_cost(st, 7, r);
    sqlite3_bind_int64(st, 16, r->cost.charged_micros);
    sqlite3_bind_int64(st, 17, r->cost.released_micros);
    sq_bind_ms(st, 18, r->log_expires_at_ms);
    sq_bind_ms(st, 19, r->started_at_ms);
    sq_bind_text(st, 20, r->sandbox_backend);
    sqlite3_bind_text(st, 21, r->id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 22, f->lease_expired_before_ms);
    sqlite3_bind_int64(st, 23, (int64_t)r->divergences);
    sqlite3_bind_int64(st, 24, (sqlite3_int64)r->usage.model_attempts);
    if ((rc = sq_step_done(s, st, "run finish")))
        goto fail;
    if (sqlite3_changes(s->db) == 0) {
        rc = -EALREADY;
        goto fail;
    }
    int64_t now = r->finished_at_ms;
    if ((rc = sq_insert_ledger(s, r->org_id, r->id, "charge", r->cost.charged_micros, now)) ||
        (rc = sq_insert_ledger(s, r->org_id, r->id, "release", r->cost.released_micros, now)))
        goto fail;
    for (size_t i = 0; i < f->nevents; i++)
        if ((rc = sq_event_insert_locked(s, r->id, &f->events[i])))
            goto fail;
    if (f->webhook && (rc = sq_webhook_enqueue_locked(s, r->org_id, f->webhook)))
        goto fail;
    rc = sq_commit(s);
    if (rc)
        goto fail;
    goto out;
fail:
    sq_rollback(s);
out:
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* The claim, and with started_at > 0 the start too: one statement. */
static int claim(struct eph_store *base, const char *run_id, const char *node_id,
                 int64_t lease_until_ms, int64_t started_at_ms)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = sq_prepare(s,
                        "UPDATE runs SET node_id = ?1, lease_expires_at = ?2, "
                        "status = CASE WHEN ?4 > 0 THEN 'starting' ELSE status END, "
                        "started_at = CASE WHEN ?4 > 0 THEN ?4 ELSE started_at END "
                        "WHERE id = ?3 AND status = 'queued' AND (node_id IS NULL OR node_id = ?1)",
                        &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, node_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 2, lease_until_ms);
        sqlite3_bind_text(st, 3, run_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 4, started_at_ms);
        rc = sq_step_done(s, st, "run claim");
        if (!rc && sqlite3_changes(s->db) == 0)
            rc = -EALREADY;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sq_run_claim(struct eph_store *base, const char *run_id, const char *node_id,
                 int64_t lease_until_ms)
{
    return claim(base, run_id, node_id, lease_until_ms, 0);
}

int sq_run_claim_start(struct eph_store *base, const char *run_id, const char *node_id,
                       int64_t lease_until_ms, int64_t started_at_ms)
{
    return claim(base, run_id, node_id, lease_until_ms, started_at_ms > 0 ? started_at_ms : 1);
}

/* The runs of q->waiting as a JSON array (for json_each), or NULL without memory. */
static char *waiting_json(const struct eph_claim_next *q)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < q->nwaiting; i++)
        if (json_array_append_new(a, json_string(q->waiting[i]))) {
            json_decref(a);
            a = NULL;
        }
    char *text = a ? json_dumps(a, JSON_COMPACT) : NULL;
    json_decref(a);
    return text;
}

/* One node: every queued run is this node's to claim, a zero-data-retention one too. The choice
 * (docs/STORE.md, "Fair claims") and the claim are one statement on the writer. */
int sq_run_claim_next(struct eph_store *base, const struct eph_claim_next *q, char *run_id,
                      size_t idlen)
{
    struct sq_conn *s = WRITER(base);
    char *waiting = waiting_json(q);
    if (!waiting)
        return -ENOMEM;
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = sq_prepare(
        s,
        "UPDATE runs SET node_id = ?1, lease_expires_at = ?2, "
        "status = CASE WHEN ?5 > 0 THEN 'starting' ELSE status END, "
        "started_at = CASE WHEN ?5 > 0 THEN ?5 ELSE started_at END WHERE rowid = ("
        "SELECT r.rowid FROM (SELECT "
        "(SELECT COUNT(*) FROM runs a WHERE a.org_id = o.id AND a.node_id IS NOT NULL AND "
        "a.kind = 'run' AND "
        "a.status IN ('queued', 'starting', 'running')) AS n, "
        "(SELECT h.rowid FROM runs h WHERE h.org_id = o.id AND h.status = 'queued' AND "
        "(h.node_id IS NULL OR (h.node_id = ?1 AND h.id IN (SELECT value FROM json_each(?4)))) "
        "ORDER BY h.created_at, h.rowid LIMIT 1) AS head FROM orgs o) f "
        "JOIN runs r ON r.rowid = f.head WHERE ?3 = 0 OR f.n < ?3 "
        "ORDER BY f.n, r.created_at, r.rowid LIMIT 1) RETURNING id",
        &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, q->node_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 2, q->lease_until_ms);
        sqlite3_bind_int64(st, 3, q->max_per_org);
        sqlite3_bind_text(st, 4, waiting, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 5, q->started_at_ms);
        int r = sqlite3_step(st);
        if (r == SQLITE_ROW) {
            const unsigned char *id = sqlite3_column_text(st, 0);
            snprintf(run_id, idlen, "%s", id ? (const char *)id : "");
            r = sqlite3_step(st);
        } else {
            rc = -ENOENT;
        }
        if (r != SQLITE_DONE)
            rc = sq_db_err(s, r, "claim next");
        sq_done(st);
    }
    pthread_mutex_unlock(&s->lock);
    free(waiting);
    return rc;
}

int sq_run_renew(struct eph_store *base, const char *run_id, const char *node_id,
                 int64_t lease_until_ms, int64_t compute_micros)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    /* The checkpoint never lowers what was measured and never exceeds what the reservation leaves
     * after the model and web charges. */
    int rc = sq_prepare(s,
                        "UPDATE runs SET lease_expires_at = ?1, compute_micros = "
                        "MAX(compute_micros, MIN(?2, reserved_micros - model_micros - web_micros)) "
                        "WHERE id = ?3 AND node_id = ?4 AND status IN ('queued', 'starting', "
                        "'running')",
                        &st);
    if (!rc) {
        sqlite3_bind_int64(st, 1, lease_until_ms);
        sqlite3_bind_int64(st, 2, compute_micros);
        sqlite3_bind_text(st, 3, run_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 4, node_id, -1, SQLITE_TRANSIENT);
        rc = sq_step_done(s, st, "run renew");
        if (!rc && sqlite3_changes(s->db) == 0)
            rc = -ESTALE;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sq_runs_lease_expired(struct eph_store *base, int64_t now_ms, eph_run_cb cb, void *ctx)
{
    struct sq_conn *s = READER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc =
        sq_prepare(s,
                   "SELECT " EPH_RUN_COLUMNS " FROM runs WHERE status IN ('queued', 'starting', "
                   "'running') AND node_id IS NOT NULL AND lease_expires_at < ? "
                   "ORDER BY created_at",
                   &st);
    if (!rc) {
        sqlite3_bind_int64(st, 1, now_ms);
        rc = each_run(s, st, 0, cb, ctx, NULL);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sq_purge_logs(struct eph_store *base, int64_t now_ms, unsigned *purged)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    int rc = sq_begin(s);
    if (rc)
        goto out;
    /* Events keep their type and timing; their message and data (commands, outputs) go, and so
     * does the stored text that carried them (it is made again, from what is left, on read). */
    sqlite3_stmt *st;
    if ((rc = sq_prepare(
             s,
             "UPDATE events SET message = type, data = '{}', wire = NULL WHERE run_id IN "
             "(SELECT id FROM runs WHERE log_purged = 0 AND log_expires_at <= ?)",
             &st)))
        goto fail;
    sqlite3_bind_int64(st, 1, now_ms);
    if ((rc = sq_step_done(s, st, "purge events")))
        goto fail;
    /* The files the run brought back go with its log. */
    if ((rc = sq_prepare(s,
                         "DELETE FROM run_outputs WHERE run_id IN "
                         "(SELECT id FROM runs WHERE log_purged = 0 AND log_expires_at <= ?)",
                         &st)))
        goto fail;
    sqlite3_bind_int64(st, 1, now_ms);
    if ((rc = sq_step_done(s, st, "purge outputs")))
        goto fail;
    if ((rc = sq_prepare(
             s,
             "UPDATE runs SET prompt = NULL, files = NULL, result = NULL, log_purged = 1 "
             "WHERE log_purged = 0 AND log_expires_at <= ?",
             &st)))
        goto fail;
    sqlite3_bind_int64(st, 1, now_ms);
    if ((rc = sq_step_done(s, st, "purge runs")))
        goto fail;
    *purged = (unsigned)sqlite3_changes(s->db);
    if ((rc = sq_commit(s)))
        goto fail;
    goto out;
fail:
    sq_rollback(s);
out:
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sq_event_append(struct eph_store *base, const char *run_id, const struct eph_event *e)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    int rc = sq_event_insert_locked(s, run_id, e);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sq_events_list(struct eph_store *base, const char *run_id, uint64_t after_seq, unsigned limit,
                   eph_event_cb cb, void *ctx)
{
    struct sq_conn *s = READER(base);
    struct eph_event *rows = NULL;
    size_t n = 0, cap = 0;
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = sq_prepare(s,
                        "SELECT seq, t_ms, at_ms, source, type, message, data, wire FROM events "
                        "WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                        &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, run_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)after_seq);
        sqlite3_bind_int(st, 3, limit ? (int)limit : -1);
        int r;
        while ((r = sqlite3_step(st)) == SQLITE_ROW) {
            if (n == cap) {
                size_t ncap = cap ? cap * 2 : 32;
                struct eph_event *p = realloc(rows, ncap * sizeof(*rows));
                if (!p) {
                    rc = -ENOMEM;
                    break;
                }
                rows = p;
                cap = ncap;
            }
            struct eph_event *e = &rows[n++];
            memset(e, 0, sizeof(*e));
            e->seq = (uint64_t)sqlite3_column_int64(st, 0);
            e->t_ms = sqlite3_column_int64(st, 1);
            e->at_ms = sqlite3_column_int64(st, 2);
            snprintf(e->source, sizeof(e->source), "%s", sqlite3_column_text(st, 3));
            snprintf(e->type, sizeof(e->type), "%s", sqlite3_column_text(st, 4));
            if (sq_col_dup(st, 5, &e->message) || sq_col_dup(st, 7, &e->wire) ||
                !(e->data =
                      eph_event_stored_data(e->wire, (const char *)sqlite3_column_text(st, 6)))) {
                rc = -ENOMEM; /* not an event with a part missing */
                break;
            }
        }
        if (!rc && r != SQLITE_DONE)
            rc = sq_db_err(s, r, "events list");
        sq_done(st);
    }
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < n; i++) {
        if (!rc)
            rc = cb(&rows[i], ctx);
        eph_event_release(&rows[i]);
    }
    free(rows);
    return rc;
}
