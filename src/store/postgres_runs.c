/*
 * postgres_runs.c - the PostgreSQL store's runs: insert under the org's row lock, reads, progress,
 * settlement, leases, the fair claim, retention, and their events (fenced).
 */
#include <errno.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "common/log.h"
#include "store/run_row.h"
#include "store/postgres_store.h"
#include "store/store.h"

/* ---- runs ---- */

static int count_queued_once(struct pg_store *s, struct pg_conn *c, const char *org_id,
                             unsigned *out)
{
    struct params p = {0};
    p_text(&p, org_id);
    PGresult *r = NULL;
    int rc = pg_exec(s, c, "SELECT COUNT(*) FROM runs WHERE org_id = $1 AND status = 'queued'", &p,
                     &r, NULL, "count queued");
    if (!rc) {
        *out = (unsigned)pg_col_i64(r, 0, 0);
        PQclear(r);
    }
    return rc;
}

int pg_runs_count_queued(struct eph_store *base, const char *org_id, unsigned *out)
{
    struct pg_store *s = P(base);
    return WITH_CONN(s, count_queued_once(s, c, org_id, out));
}

int pg_runs_count_by_status(struct eph_store *base, eph_status_count_cb cb, void *ctx)
{
    struct pg_store *s = P(base);
    PGresult *r = NULL;
    int rc = WITH_CONN(
        s, pg_select_once(s, c,
                          "SELECT status, COUNT(*) FROM runs WHERE kind = 'run' GROUP BY status "
                          "ORDER BY status",
                          NULL, &r, "count by status"));
    for (int i = 0; !rc && i < PQntuples(r); i++)
        rc = cb(pg_val(r, i, 0), (uint64_t)pg_col_i64(r, i, 1), ctx);
    PQclear(r);
    return rc;
}

/* An event's columns as $1..$9: run_id, seq, t_ms, at_ms, source, type, message, data, wire. */
static void p_event(struct params *p, const char *run_id, const struct eph_event *e)
{
    p_text(p, run_id);
    p_i64(p, (int64_t)e->seq);
    p_i64(p, e->t_ms);
    p_i64(p, e->at_ms);
    p_text(p, e->source);
    p_text(p, e->type);
    p_text(p, e->message ? e->message : "");
    p_json(p, e->wire ? NULL : e->data, "{}"); /* with its wire text, data is in it (store.h) */
    p_text(p, e->wire);
}

/* An event inserted with its notification riding the same transaction: listeners hear of the
 * event when it is committed, never before. The payload is the run id and the seq, never the
 * content. (Unfenced: the run's own create and settlement, which hold its row.) */
static const char event_insert_sql[] =
    "WITH ins AS (INSERT INTO events (run_id, seq, t_ms, at_ms, source, type, message, data, "
    "wire) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING run_id, seq, type) SELECT "
    "pg_notify('eph_events', run_id || ' ' || seq || ' ' || type) FROM ins";

static int batch_event(struct pg_batch *b, const char *sql, int guard, const char *run_id,
                       const struct eph_event *e)
{
    struct params *p = pg_batch_add(b, sql, "event insert", guard);
    if (!p)
        return -E2BIG;
    p_event(p, run_id, e);
    return 0;
}

/* The create, in one round trip (a batch: docs/STORE.md, "The create and the settlement, one
 * round trip each"). The org's row is locked by the first statement, so the org's reservations
 * are serialised on every node, and each statement after it reads what the others committed
 * before the lock was granted: the queue cap (-EAGAIN), the balance (-EDQUOT), then the run, its
 * reservation, its first event and the nodes' notification. The lock is held until the batch's
 * end, with no round trip to the client in between. */
static const char org_lock_sql[] =
    "SELECT 1 / COUNT(*) FROM (SELECT id FROM orgs WHERE id = $1 FOR UPDATE) o";
static const char queue_cap_sql[] = "SELECT 1 / (COUNT(*) < $2::bigint)::int FROM runs WHERE "
                                    "org_id = $1 AND status = 'queued'";
static const char balance_check_sql[] =
    "SELECT 1 / (balance_micros - reserved_micros >= $2::bigint)::int FROM orgs WHERE id = $1";
static const char run_insert_sql[] =
    "INSERT INTO runs (id, org_id, status, model, prompt, files, connections, "
    "metadata, shell, web, zdr, timeout_seconds, created_at, reserved_micros, node_id, "
    "lease_expires_at, web_allow, replay_of, image, image_digest, outputs, kind, "
    "idle_timeout_seconds) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, "
    "$17, $18, $19, $20, $21, $22, $23)";
static const char queued_notify_sql[] = "SELECT pg_notify('eph_queued', $1)";

static void p_run_insert(struct params *p, const struct eph_run *r)
{
    p_text(p, r->id);
    p_text(p, r->org_id);
    p_text(p, eph_run_status_name(r->status));
    p_text(p, r->model);
    p_text(p, r->prompt);
    p_json(p, r->files, NULL);
    p_json(p, r->connections, "[]");
    p_json(p, r->metadata, "{}");
    p_i64(p, r->shell);
    p_i64(p, r->web);
    p_i64(p, r->zdr);
    p_i64(p, r->timeout_seconds);
    p_i64(p, r->created_at_ms);
    p_i64(p, r->cost.reserved_micros);
    p_text(p, r->node_id[0] ? r->node_id : NULL);
    p_ms(p, r->lease_expires_at_ms);
    p_json(p, r->web_allow, NULL);
    p_text(p, r->replay_of);
    p_text(p, r->image[0] ? r->image : "default");
    p_text(p, r->image_digest[0] ? r->image_digest : NULL);
    p_json(p, r->outputs, NULL);
    p_text(p, eph_run_kind_name(r->kind));
    p_i64(p, r->idle_timeout_seconds);
}

static int run_insert_once(struct pg_store *s, struct pg_conn *c, const struct eph_run *r,
                           const struct eph_event *first, unsigned max_queued)
{
    struct pg_batch *b = calloc(1, sizeof(*b));
    if (!b)
        return -ENOMEM;
    struct params *p = pg_batch_add(b, org_lock_sql, "balance", -ENOENT);
    p_text(p, r->org_id);
    if (max_queued) {
        p = pg_batch_add(b, queue_cap_sql, "count queued", -EAGAIN);
        p_text(p, r->org_id);
        p_i64(p, max_queued);
    }
    p = pg_batch_add(b, balance_check_sql, "balance", -EDQUOT);
    p_text(p, r->org_id);
    p_i64(p, r->cost.reserved_micros);
    p_run_insert(pg_batch_add(b, run_insert_sql, "run insert", 0), r);
    int rc =
        pg_batch_ledger(b, r->org_id, r->id, "reserve", r->cost.reserved_micros, r->created_at_ms);
    if (!rc && first)
        rc = batch_event(b, event_insert_sql, 0, r->id, first);
    /* Nodes waiting for work hear of it. */
    if (!rc && (p = pg_batch_add(b, queued_notify_sql, "notify", 0)))
        p_text(p, r->id);
    else if (!rc)
        rc = -E2BIG;
    if (!rc)
        rc = pg_batch_run(s, c, b);
    pg_batch_free(b);
    return rc;
}

int pg_run_insert_capped(struct eph_store *base, const struct eph_run *r,
                         const struct eph_event *first, unsigned max_queued)
{
    struct pg_store *s = P(base);
    /* A retried insert whose first commit went through finds its own run: -EEXIST, and the
     * API's idempotency record tells the client. */
    return WITH_CONN(s, run_insert_once(s, c, r, first, max_queued));
}

int pg_run_insert(struct eph_store *base, const struct eph_run *r, const struct eph_event *first)
{
    return pg_run_insert_capped(base, r, first, 0);
}

static const char *pg_row_text(const struct eph_row *row, int col)
{
    const PGresult *res = row->impl;
    return pg_isnull(res, row->row, col) ? NULL : pg_val(res, row->row, col);
}

static int64_t pg_row_i64(const struct eph_row *row, int col)
{
    return pg_col_i64(row->impl, row->row, col);
}

static int row_to_run(const PGresult *res, int i, struct eph_run *r)
{
    const struct eph_row row = {.impl = res, .row = i, .text = pg_row_text, .i64 = pg_row_i64};
    return eph_run_from_row(&row, r);
}

int pg_run_get(struct eph_store *base, const char *id, const char *org_id, struct eph_run *out)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, id);
    PGresult *r = NULL;
    int rc = WITH_CONN(s, pg_select_once(s, c, "SELECT " EPH_RUN_COLUMNS " FROM runs WHERE id = $1",
                                         &p, &r, "run get"));
    if (!rc) {
        /* Another org's run is indistinguishable from no run at all. */
        if (!PQntuples(r) || (org_id && strcmp(pg_val(r, 0, 1), org_id) != 0))
            rc = -ENOENT;
        else
            rc = row_to_run(r, 0, out);
    }
    PQclear(r);
    return rc;
}

/* Runs the rows of a SELECT EPH_RUN_COLUMNS result through cb, at most limit (0: all). */
static int each_run(PGresult *res, unsigned limit, eph_run_cb cb, void *ctx, bool *has_more)
{
    int n = PQntuples(res), rc = 0;
    if (has_more)
        *has_more = limit && (unsigned)n > limit;
    for (int i = 0; !rc && i < n && (!limit || (unsigned)i < limit); i++) {
        struct eph_run r;
        rc = row_to_run(res, i, &r);
        if (rc)
            break;
        rc = cb(&r, ctx);
        eph_run_release(&r);
    }
    return rc;
}

int pg_run_list(struct eph_store *base, const char *org_id, unsigned limit, const char *after,
                const char *status, const json_t *metadata, enum eph_run_kind kind, eph_run_cb cb,
                void *ctx, bool *has_more)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, org_id);
    p_text(&p, status);
    p_text(&p, after);
    p_i64(&p, (int64_t)limit + 1);
    if (metadata)
        p_json(&p, metadata, "{}");
    else
        p_text(&p, NULL);
    p_text(&p, eph_run_kind_name(kind));
    PGresult *r = NULL;
    int rc = WITH_CONN(
        s,
        pg_select_once(s, c,
                       "SELECT " EPH_RUN_COLUMNS " FROM runs WHERE org_id = $1 AND kind = $6"
                       " AND ($2::text IS NULL OR status = $2::text)"
                       " AND ($3::text IS NULL OR (created_at, seq) < "
                       "  (SELECT created_at, seq FROM runs WHERE id = $3::text AND org_id = $1))"
                       /* containment: every filter pair is one of the run's metadata pairs */
                       " AND ($5::text IS NULL OR metadata::jsonb @> $5::jsonb)"
                       " ORDER BY created_at DESC, seq DESC LIMIT $4",
                       &p, &r, "run list"));
    p_free(&p);
    if (!rc)
        rc = each_run(r, limit, cb, ctx, has_more);
    PQclear(r);
    return rc;
}

int pg_runs_in_state(struct eph_store *base, enum eph_run_status state, eph_run_cb cb, void *ctx)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, eph_run_status_name(state));
    PGresult *r = NULL;
    int rc = WITH_CONN(s, pg_select_once(s, c,
                                         "SELECT " EPH_RUN_COLUMNS
                                         " FROM runs WHERE status = $1 ORDER BY created_at, seq",
                                         &p, &r, "runs in state"));
    if (!rc)
        rc = each_run(r, 0, cb, ctx, NULL);
    PQclear(r);
    return rc;
}

#define RUN_STATE_UPDATE                                                                           \
    "UPDATE runs SET status = $1, started_at = $2, sandbox_backend = $3, vcpus = $4, "             \
    "memory_mib = $5 WHERE id = $6 AND status IN ('queued', 'starting', 'running')"
static const char run_state_sql[] = RUN_STATE_UPDATE;
/* In a batch: fails it (division by zero) when the run has ended (-EALREADY). */
static const char run_state_guard_sql[] =
    "WITH u AS (" RUN_STATE_UPDATE " RETURNING 1) SELECT 1 / COUNT(*) FROM u";

static void p_run_state(struct params *p, const struct eph_run *r)
{
    p_text(p, eph_run_status_name(r->status));
    p_ms(p, r->started_at_ms);
    p_text(p, r->sandbox_backend);
    p_i64(p, r->vcpus);
    p_i64(p, r->memory_mib);
    p_text(p, r->id);
}

int pg_run_update(struct eph_store *base, const struct eph_run *r)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_run_state(&p, r);
    unsigned long n = 0;
    int rc = WITH_CONN(s, pg_changed_once(s, c, run_state_sql, &p, &n, "run update"));
    return rc ? rc : n ? 0 : -EALREADY;
}

static void p_usage_cost(struct params *p, const struct eph_run *r)
{
    p_i64(p, (int64_t)r->usage.model_calls);
    p_i64(p, (int64_t)r->usage.input_tokens);
    p_i64(p, (int64_t)r->usage.output_tokens);
    p_i64(p, (int64_t)r->usage.shell_commands);
    p_i64(p, (int64_t)r->usage.web_requests);
    p_i64(p, (int64_t)r->usage.connection_requests);
    p_i64(p, r->cost.model_micros);
    p_i64(p, r->cost.web_micros);
    p_i64(p, r->cost.compute_micros);
}

static const char run_progress_sql[] =
    "UPDATE runs SET model_calls = $1, input_tokens = $2, output_tokens = $3, "
    "shell_commands = $4, web_requests = $5, connection_requests = $6, model_micros = $7, "
    "web_micros = $8, compute_micros = $9, model_attempts = $11 WHERE id = $10 AND status IN "
    "('queued', 'starting', 'running')";

static void p_run_progress(struct params *p, const struct eph_run *r)
{
    p_usage_cost(p, r);
    p_text(p, r->id);
    p_i64(p, (int64_t)r->usage.model_attempts);
}

int pg_run_progress(struct eph_store *base, const struct eph_run *r)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_run_progress(&p, r);
    unsigned long n = 0;
    return WITH_CONN(s, pg_changed_once(s, c, run_progress_sql, &p, &n, "run progress"));
}

/* The settlement, in one round trip (a batch, as the create): the run's final state (-EALREADY,
 * and nothing written, when it has ended already or its lease is still alive where the caller
 * said it must have expired), its charge and release in the ledger and the org's totals, its
 * closing events and the webhook deliveries they queue. */
static const char run_finish_sql[] =
    "WITH u AS (UPDATE runs SET status = $1, finished_at = $2, result = $3, error_type = $4, "
    "error_code = $5, error_message = $6, model_calls = $7, input_tokens = $8, "
    "output_tokens = $9, shell_commands = $10, web_requests = $11, "
    "connection_requests = $12, model_micros = $13, web_micros = $14, "
    "compute_micros = $15, charged_micros = $16, released_micros = $17, "
    "log_expires_at = $18, started_at = COALESCE(started_at, $19), "
    "sandbox_backend = COALESCE($20, sandbox_backend), divergences = $23, "
    "model_attempts = $24 "
    "WHERE id = $21 AND status IN ('queued', 'starting', 'running') "
    "AND ($22::bigint = 0 OR lease_expires_at < $22::bigint) RETURNING 1) "
    "SELECT 1 / COUNT(*) FROM u";

static int run_finish_once(struct pg_store *s, struct pg_conn *c, const struct eph_run_final *f)
{
    const struct eph_run *r = f->run;
    struct pg_batch *b = calloc(1, sizeof(*b));
    if (!b)
        return -ENOMEM;
    struct params *p = pg_batch_add(b, run_finish_sql, "run finish", -EALREADY);
    p_text(p, eph_run_status_name(r->status));
    p_i64(p, r->finished_at_ms);
    p_text(p, r->zdr ? NULL : r->result);
    p_text(p, r->error_type);
    p_text(p, r->error_code);
    p_text(p, r->error_message);
    p_usage_cost(p, r);
    p_i64(p, r->cost.charged_micros);
    p_i64(p, r->cost.released_micros);
    p_ms(p, r->log_expires_at_ms);
    p_ms(p, r->started_at_ms);
    p_text(p, r->sandbox_backend);
    p_text(p, r->id);
    p_i64(p, f->lease_expired_before_ms);
    p_i64(p, (int64_t)r->divergences);
    p_i64(p, (int64_t)r->usage.model_attempts);
    int64_t now = r->finished_at_ms;
    int rc = pg_batch_ledger(b, r->org_id, r->id, "charge", r->cost.charged_micros, now);
    if (!rc)
        rc = pg_batch_ledger(b, r->org_id, r->id, "release", r->cost.released_micros, now);
    for (size_t i = 0; !rc && i < f->nevents; i++)
        rc = batch_event(b, event_insert_sql, 0, r->id, &f->events[i]);
    if (!rc && f->webhook) {
        p = pg_batch_add(b, pg_webhook_enqueue_sql, "webhook enqueue", 0);
        if (p)
            pg_webhook_enqueue_params(p, r->org_id, f->webhook);
        else
            rc = -E2BIG;
    }
    if (!rc)
        rc = pg_batch_run(s, c, b);
    pg_batch_free(b);
    return rc;
}

int pg_run_finish(struct eph_store *base, const struct eph_run_final *f)
{
    struct pg_store *s = P(base);
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
    return WITH_CONN(s, run_finish_once(s, c, f));
}

/* The claim, and with started_at > 0 the start too: one statement. */
static int claim(struct eph_store *base, const char *run_id, const char *node_id,
                 int64_t lease_until_ms, int64_t started_at_ms)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, node_id);
    p_i64(&p, lease_until_ms);
    p_text(&p, run_id);
    p_i64(&p, started_at_ms);
    unsigned long n = 0;
    int rc = WITH_CONN(s, pg_changed_once(s, c,
                                          "UPDATE runs SET node_id = $1, lease_expires_at = $2, "
                                          "status = CASE WHEN $4::bigint > 0 THEN 'starting' "
                                          "ELSE status END, started_at = CASE WHEN $4::bigint > 0 "
                                          "THEN $4::bigint ELSE started_at END "
                                          "WHERE id = $3 AND status = 'queued' AND "
                                          "(node_id IS NULL OR node_id = $1)",
                                          &p, &n, "run claim"));
    return rc ? rc : n ? 0 : -EALREADY;
}

int pg_run_claim(struct eph_store *base, const char *run_id, const char *node_id,
                 int64_t lease_until_ms)
{
    return claim(base, run_id, node_id, lease_until_ms, 0);
}

int pg_run_claim_start(struct eph_store *base, const char *run_id, const char *node_id,
                       int64_t lease_until_ms, int64_t started_at_ms)
{
    return claim(base, run_id, node_id, lease_until_ms, started_at_ms > 0 ? started_at_ms : 1);
}

int pg_run_renew(struct eph_store *base, const char *run_id, const char *node_id,
                 int64_t lease_until_ms, int64_t compute_micros)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_i64(&p, lease_until_ms);
    p_i64(&p, compute_micros);
    p_text(&p, run_id);
    p_text(&p, node_id);
    unsigned long n = 0;
    int rc = WITH_CONN_URGENT(s, pg_changed_once(s, c,
                                                 "UPDATE runs SET lease_expires_at = $1, "
                                                 "compute_micros = "
                                                 "GREATEST(compute_micros, LEAST($2::bigint, "
                                                 "reserved_micros - model_micros - web_micros)) "
                                                 "WHERE id = $3 AND node_id = $4 AND status IN "
                                                 "('queued', 'starting', 'running')",
                                                 &p, &n, "run renew"));
    return rc ? rc : n ? 0 : -ESTALE;
}

int pg_runs_lease_expired(struct eph_store *base, int64_t now_ms, eph_run_cb cb, void *ctx)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_i64(&p, now_ms);
    PGresult *r = NULL;
    int rc = WITH_CONN_URGENT(
        s, pg_select_once(s, c,
                          "SELECT " EPH_RUN_COLUMNS " FROM runs WHERE status IN "
                          "('queued', 'starting', 'running') AND node_id IS NOT NULL "
                          "AND lease_expires_at < $1 ORDER BY created_at, seq",
                          &p, &r, "expired leases"));
    if (!rc)
        rc = each_run(r, 0, cb, ctx, NULL);
    PQclear(r);
    return rc;
}

static int purge_once(struct pg_store *s, struct pg_conn *c, int64_t now_ms, unsigned *purged)
{
    int rc = pg_begin(s, c);
    if (rc)
        return rc;
    struct params p = {0};
    p_i64(&p, now_ms);
    if ((rc = pg_exec(s, c,
                      "UPDATE events SET message = type, data = '{}', wire = NULL WHERE run_id IN "
                      "(SELECT id FROM runs WHERE log_purged = 0 AND log_expires_at <= $1)",
                      &p, NULL, NULL, "purge events")))
        return rc;
    /* The files the run brought back go with its log. */
    if ((rc = pg_exec(s, c,
                      "DELETE FROM run_outputs WHERE run_id IN "
                      "(SELECT id FROM runs WHERE log_purged = 0 AND log_expires_at <= $1)",
                      &p, NULL, NULL, "purge outputs")))
        return rc;
    unsigned long n = 0;
    if ((rc = pg_exec(s, c,
                      "UPDATE runs SET prompt = NULL, files = NULL, result = NULL, log_purged = 1 "
                      "WHERE log_purged = 0 AND log_expires_at <= $1",
                      &p, NULL, &n, "purge runs")))
        return rc;
    *purged = (unsigned)n;
    return pg_commit(s, c);
}

int pg_purge_logs(struct eph_store *base, int64_t now_ms, unsigned *purged)
{
    struct pg_store *s = P(base);
    return WITH_CONN(s, purge_once(s, c, now_ms, purged));
}

/* ---- events ---- */

/* The append of one event behind its run's fence, and the notification of it (riding the same
 * transaction: listeners hear of it when it is committed), as CTEs; "notified" has a row when the
 * event was appended. */
#define EVENT_APPEND_CTE                                                                           \
    "WITH live AS (SELECT id FROM runs WHERE id = $1 AND status IN ('queued', 'starting', "        \
    "'running') FOR SHARE), ins AS (INSERT INTO events (run_id, seq, t_ms, at_ms, source, type, "  \
    "message, data, wire) SELECT id, $2::bigint, $3::bigint, $4::bigint, $5::text, $6::text, "     \
    "$7::text, $8::text, $9::text FROM live RETURNING run_id, seq, type), notified AS (SELECT "    \
    "pg_notify('eph_events', run_id || ' ' || seq || ' ' || type) FROM ins)"
/* In a batch: fails it (division by zero) when fenced off (-ESTALE). */
static const char event_guard_sql[] = EVENT_APPEND_CTE " SELECT 1 / COUNT(*) FROM notified";

/* The fence of a run's events (docs/STORE.md, "Fencing"): an event is appended only while its run
 * is unfinished, under a share lock on the run's row, so that a node whose run another node
 * settled as lost (it was paused or cut off past its lease) cannot add to the closed timeline: the
 * settlement waits for the append, or the append sees the settlement. -ESTALE when fenced off. */
static int event_append_once(struct pg_store *s, struct pg_conn *c, const char *run_id,
                             const struct eph_event *e)
{
    struct params p = {0};
    p_event(&p, run_id, e);
    PGresult *r = NULL;
    int rc =
        pg_exec(s, c, EVENT_APPEND_CTE " SELECT 1 FROM notified", &p, &r, NULL, "event append");
    p_free(&p);
    if (!rc && PQntuples(r) == 0)
        rc = -ESTALE;
    PQclear(r);
    return rc;
}

/* One step in one transaction and one round trip (a batch: docs/STORE.md, "A step, one round
 * trip"): its state or progress and its events, where BEGIN, each statement and COMMIT were one
 * round trip each. All or nothing: the run ended (-EALREADY, a state change) or fenced off
 * (-ESTALE) writes none of it. A first event already there on a retry means the first attempt's
 * commit went through (-EEXIST, which pg_run_step takes as done). */
static int run_step_once(struct pg_store *s, struct pg_conn *c, const struct eph_run *r,
                         unsigned what, const struct eph_event *events, size_t n)
{
    struct pg_batch *b = calloc(1, sizeof(*b));
    if (!b)
        return -ENOMEM;
    if (what & EPH_STEP_STATE)
        p_run_state(pg_batch_add(b, run_state_guard_sql, "run update", -EALREADY), r);
    if (what & EPH_STEP_PROGRESS)
        p_run_progress(pg_batch_add(b, run_progress_sql, "run progress", 0), r);
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++)
        rc = batch_event(b, event_guard_sql, -ESTALE, r->id, &events[i]);
    if (!rc && b->n)
        rc = pg_batch_run(s, c, b);
    pg_batch_free(b);
    return rc;
}

int pg_run_step(struct eph_store *base, const struct eph_run *r, unsigned what,
                const struct eph_event *events, size_t n)
{
    struct pg_store *s = P(base);
    unsigned attempts = 0;
    int rc = WITH_CONN(s, (attempts++, run_step_once(s, c, r, what, events, n)));
    if (rc == -EEXIST && attempts > 1)
        rc = 0;
    return rc;
}

int pg_event_append(struct eph_store *base, const char *run_id, const struct eph_event *e)
{
    struct pg_store *s = P(base);
    unsigned attempts = 0;
    int rc = WITH_CONN(s, (attempts++, event_append_once(s, c, run_id, e)));
    /* The first attempt's commit may have gone through before its connection was lost: the
     * event is there, once. */
    if (rc == -EEXIST && attempts > 1)
        rc = 0;
    return rc;
}

int pg_events_list(struct eph_store *base, const char *run_id, uint64_t after_seq, unsigned limit,
                   eph_event_cb cb, void *ctx)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, run_id);
    p_i64(&p, (int64_t)after_seq);
    if (limit)
        p_i64(&p, limit);
    else
        p_text(&p, NULL);
    PGresult *r = NULL;
    int rc = WITH_CONN(
        s, pg_select_once(s, c,
                          "SELECT seq, t_ms, at_ms, source, type, message, data, wire FROM "
                          "events WHERE run_id = $1 AND seq > $2 ORDER BY seq "
                          "LIMIT $3::bigint",
                          &p, &r, "events list"));
    for (int i = 0; !rc && i < PQntuples(r); i++) {
        struct eph_event e;
        memset(&e, 0, sizeof(e));
        e.seq = (uint64_t)pg_col_i64(r, i, 0);
        e.t_ms = pg_col_i64(r, i, 1);
        e.at_ms = pg_col_i64(r, i, 2);
        pg_col_copy(r, i, 3, e.source, sizeof(e.source));
        pg_col_copy(r, i, 4, e.type, sizeof(e.type));
        if (pg_col_dup(r, i, 5, &e.message) || pg_col_dup(r, i, 7, &e.wire) ||
            !(e.data = eph_event_stored_data(e.wire, pg_isnull(r, i, 6) ? NULL : pg_val(r, i, 6))))
            rc = -ENOMEM; /* not an event with a part missing */
        else
            rc = cb(&e, ctx);
        eph_event_release(&e);
    }
    PQclear(r);
    return rc;
}

/* q->waiting as a text[] literal ({"a","b"}), each element quoted; NULL without memory. */
static char *waiting_array(const struct eph_claim_next *q)
{
    size_t len = 3;
    for (size_t i = 0; i < q->nwaiting; i++)
        len += 2 * strlen(q->waiting[i]) + 3;
    char *a = malloc(len), *w = a;
    if (!a)
        return NULL;
    *w++ = '{';
    for (size_t i = 0; i < q->nwaiting; i++) {
        if (i)
            *w++ = ',';
        *w++ = '"';
        for (const char *c = q->waiting[i]; *c; c++) {
            if (*c == '"' || *c == '\\')
                *w++ = '\\';
            *w++ = *c;
        }
        *w++ = '"';
    }
    *w++ = '}';
    *w = '\0';
    return a;
}

/* One statement: it chooses (docs/STORE.md, "Fair claims") and claims. The row lock is taken on
 * the chosen run only and held until the update; a run another node is claiming at this instant
 * is skipped, not waited for, and then the statement claims nothing but says what it chose
 * (-EAGAIN): the caller asks again, and sees that claim. */
static int claim_next_once(struct pg_store *s, struct pg_conn *c, const struct eph_claim_next *q,
                           const char *waiting, char *run_id, size_t idlen)
{
    struct params p = {0};
    p_text(&p, q->node_id);
    p_i64(&p, q->lease_until_ms);
    p_i64(&p, q->max_per_org);
    p_text(&p, waiting);
    p_i64(&p, q->started_at_ms);
    PGresult *r = NULL;
    int rc = pg_exec(s, c,
                     "WITH pick AS (SELECT h.id FROM orgs o CROSS JOIN LATERAL "
                     "(SELECT COUNT(*) AS n FROM runs a WHERE a.org_id = o.id AND "
                     "a.node_id IS NOT NULL AND a.kind = 'run' AND "
                     "a.status IN ('queued', 'starting', 'running')) c "
                     "CROSS JOIN LATERAL (SELECT id, created_at, seq FROM runs WHERE org_id = o.id "
                     "AND status = 'queued' AND ((node_id IS NULL AND zdr = 0) OR "
                     "((node_id IS NULL OR node_id = $1) AND id = ANY($4::text[]))) "
                     "ORDER BY created_at, seq LIMIT 1) h WHERE $3::bigint = 0 OR c.n < $3 "
                     "ORDER BY c.n, h.created_at, h.seq LIMIT 1), "
                     "claimed AS (UPDATE runs SET node_id = $1, lease_expires_at = $2, "
                     "status = CASE WHEN $5::bigint > 0 THEN 'starting' ELSE status END, "
                     "started_at = CASE WHEN $5::bigint > 0 THEN $5 ELSE started_at END "
                     "WHERE id = "
                     "(SELECT l.id FROM runs l WHERE l.id = (SELECT id FROM pick) AND "
                     "l.status = 'queued' AND (l.node_id IS NULL OR l.node_id = $1) "
                     "FOR UPDATE SKIP LOCKED) RETURNING id) "
                     "SELECT (SELECT id FROM claimed), (SELECT id FROM pick)",
                     &p, &r, NULL, "claim next");
    if (rc)
        return rc;
    if (PQntuples(r) == 1 && !PQgetisnull(r, 0, 0))
        pg_col_copy(r, 0, 0, run_id, idlen);
    else if (PQntuples(r) == 1 && !PQgetisnull(r, 0, 1))
        rc = -EAGAIN;
    else
        rc = -ENOENT;
    PQclear(r);
    return rc;
}

int pg_run_claim_next(struct eph_store *base, const struct eph_claim_next *q, char *run_id,
                      size_t idlen)
{
    struct pg_store *s = P(base);
    char *waiting = waiting_array(q);
    if (!waiting)
        return -ENOMEM;
    /* A lost race means another node claimed the chosen run just now: the next statement sees
     * that claim (and its org's count). A few tries, then "none" until the next look. */
    int rc = -EAGAIN;
    for (int i = 0; i < 4 && rc == -EAGAIN; i++)
        rc = WITH_CONN(s, claim_next_once(s, c, q, waiting, run_id, idlen));
    free(waiting);
    return rc == -EAGAIN ? -ENOENT : rc;
}
