/*
 * sqlite_webhooks.c - the SQLite store's webhooks (docs/WEBHOOKS.md): endpoints, the deliveries
 * a settlement queues, their claims and the outcome of each attempt.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "store/sqlite_store.h"
#include "store/store.h"

#define WEBHOOK_COLUMNS "id, org_id, url, events, timeout_seconds, created_at"
#define DELIVERY_COLUMNS                                                                           \
    "d.event_id, d.webhook_id, d.type, d.state, d.attempts, d.created_at, d.next_attempt_at, "     \
    "d.last_attempt_at, d.last_status, d.last_error, d.last_duration_ms"

static int row_to_webhook(sqlite3_stmt *st, struct eph_webhook *w)
{
    memset(w, 0, sizeof(*w));
    snprintf(w->id, sizeof(w->id), "%s", sqlite3_column_text(st, 0));
    snprintf(w->org_id, sizeof(w->org_id), "%s", sqlite3_column_text(st, 1));
    w->url = sq_col_strdup(st, 2);
    w->events = sq_col_json(st, 3);
    w->timeout_seconds = (unsigned)sqlite3_column_int64(st, 4);
    w->created_at_ms = sqlite3_column_int64(st, 5);
    if (!w->url || !w->events) {
        eph_webhook_release(w);
        return -ENOMEM;
    }
    return 0;
}

static int row_to_delivery(sqlite3_stmt *st, struct eph_webhook_delivery *d)
{
    memset(d, 0, sizeof(*d));
    snprintf(d->event_id, sizeof(d->event_id), "%s", sqlite3_column_text(st, 0));
    snprintf(d->webhook_id, sizeof(d->webhook_id), "%s", sqlite3_column_text(st, 1));
    snprintf(d->type, sizeof(d->type), "%s", sqlite3_column_text(st, 2));
    snprintf(d->state, sizeof(d->state), "%s", sqlite3_column_text(st, 3));
    d->attempts = (unsigned)sqlite3_column_int64(st, 4);
    d->created_at_ms = sqlite3_column_int64(st, 5);
    d->next_attempt_at_ms = sqlite3_column_int64(st, 6);
    d->last_attempt_at_ms = sqlite3_column_int64(st, 7);
    d->last_status = sqlite3_column_int(st, 8);
    d->last_error = sq_col_strdup(st, 9);
    d->last_duration_ms = sqlite3_column_int64(st, 10);
    if (sqlite3_column_type(st, 9) != SQLITE_NULL && !d->last_error)
        return -ENOMEM;
    return 0;
}

int sq_webhook_insert(struct eph_store *base, const struct eph_webhook *w)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = sq_prepare(s,
                        "INSERT INTO webhooks (id, org_id, url, events, secret, timeout_seconds, "
                        "created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                        &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, w->id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, w->org_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 3, w->url, -1, SQLITE_TRANSIENT);
        sq_bind_json(st, 4, w->events);
        sqlite3_bind_text(st, 5, w->secret_sealed, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 6, w->timeout_seconds);
        sqlite3_bind_int64(st, 7, w->created_at_ms);
        rc = sq_step_done(s, st, "webhook insert");
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sq_webhook_list(struct eph_store *base, const char *org_id, eph_webhook_cb cb, void *ctx)
{
    struct sq_conn *s = READER(base);
    struct eph_webhook *rows = calloc(EPH_WEBHOOKS_PER_ORG, sizeof(*rows));
    size_t n = 0;
    if (!rows)
        return -ENOMEM;
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = sq_prepare(s,
                        "SELECT " WEBHOOK_COLUMNS " FROM webhooks WHERE org_id = ?1 AND "
                        "disabled = 0 ORDER BY created_at, id LIMIT ?2",
                        &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(st, 2, EPH_WEBHOOKS_PER_ORG);
        int r = SQLITE_DONE;
        while (!rc && n < EPH_WEBHOOKS_PER_ORG && (r = sqlite3_step(st)) == SQLITE_ROW)
            if (!(rc = row_to_webhook(st, &rows[n])))
                n++;
        if (!rc && r != SQLITE_DONE && r != SQLITE_ROW)
            rc = sq_db_err(s, r, "webhook list");
        sq_done(st);
    }
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < n; i++) {
        if (!rc)
            rc = cb(&rows[i], ctx);
        eph_webhook_release(&rows[i]);
    }
    free(rows);
    return rc;
}

/* Hands each row to cb while it answers 0 (when rc is 0), releases them all and rows itself. */
static int pass_deliveries(struct eph_webhook_delivery *rows, size_t n, int rc, eph_delivery_cb cb,
                           void *ctx)
{
    for (size_t i = 0; i < n; i++) {
        if (!rc)
            rc = cb(&rows[i], ctx);
        eph_webhook_delivery_release(&rows[i]);
    }
    free(rows);
    return rc;
}

int sq_webhook_get(struct eph_store *base, const char *org_id, const char *id,
                   struct eph_webhook *out)
{
    struct sq_conn *s = READER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = sq_prepare(s,
                        "SELECT " WEBHOOK_COLUMNS " FROM webhooks WHERE org_id = ?1 AND id = ?2 "
                        "AND disabled = 0",
                        &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, id, -1, SQLITE_TRANSIENT);
        int r = sqlite3_step(st);
        rc = r == SQLITE_ROW    ? row_to_webhook(st, out)
             : r == SQLITE_DONE ? -ENOENT
                                : sq_db_err(s, r, "webhook get");
        sq_done(st);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* One statement of the writer with text parameters, its changes in *changed. */
static int exec_texts(struct sq_conn *s, const char *sql, const char *const *v, size_t n,
                      int64_t num, int *changed, const char *what)
{
    sqlite3_stmt *st;
    int rc = sq_prepare(s, sql, &st);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++)
        sq_bind_text(st, (int)i + 1, v[i]);
    sqlite3_bind_int64(st, (int)n + 1, num);
    rc = sq_step_done(s, st, what);
    if (!rc && changed)
        *changed = sqlite3_changes(s->db);
    return rc;
}

int sq_webhook_delete(struct eph_store *base, const char *org_id, const char *id, int64_t now_ms)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    const char *v[] = {org_id, id};
    int changed = 0;
    int rc = sq_begin(s);
    if (!rc)
        rc = exec_texts(s,
                        "UPDATE webhooks SET disabled = 1, secret = '' WHERE org_id = ?1 AND "
                        "id = ?2 AND disabled = 0",
                        v, 2, now_ms, &changed, "webhook delete");
    if (!rc && !changed)
        rc = -ENOENT;
    if (!rc)
        rc = exec_texts(s,
                        "UPDATE webhook_deliveries SET state = 'failed', body = '', "
                        "last_error = 'endpoint deleted', last_attempt_at = ?3, claimed_by = NULL, "
                        "claim_expires_at = NULL WHERE org_id = ?1 AND webhook_id = ?2 AND "
                        "state = 'pending'",
                        v, 2, now_ms, NULL, "webhook delete");
    if (!rc)
        rc = sq_commit(s);
    if (rc)
        sq_rollback(s);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sq_webhook_deliveries(struct eph_store *base, const char *org_id, const char *webhook_id,
                          unsigned limit, const char *after, eph_delivery_cb cb, void *ctx,
                          bool *has_more)
{
    struct sq_conn *s = READER(base);
    struct eph_webhook_delivery *rows = calloc(limit ? limit : 1, sizeof(*rows));
    size_t n = 0;
    bool more = false;
    if (!rows)
        return -ENOMEM;
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    /* One row past the page tells whether another follows. */
    int rc = sq_prepare(s,
                        "SELECT " DELIVERY_COLUMNS " FROM webhook_deliveries d WHERE "
                        "d.org_id = ?1 AND d.webhook_id = ?2 AND (?4 IS NULL OR "
                        "(d.created_at, d.event_id) < (SELECT a.created_at, a.event_id FROM "
                        "webhook_deliveries a WHERE a.org_id = ?1 AND a.webhook_id = ?2 AND "
                        "a.event_id = ?4)) ORDER BY d.created_at DESC, d.event_id DESC LIMIT ?3",
                        &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, webhook_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 3, (int64_t)limit + 1);
        sq_bind_text(st, 4, after);
        int r;
        while ((r = sqlite3_step(st)) == SQLITE_ROW) {
            if (n == limit) {
                more = true;
                break;
            }
            if ((rc = row_to_delivery(st, &rows[n++])))
                break;
        }
        if (!rc && !more && r != SQLITE_DONE)
            rc = sq_db_err(s, r, "webhook deliveries");
        sq_done(st);
    }
    pthread_mutex_unlock(&s->lock);
    if (has_more)
        *has_more = !rc && more;
    return pass_deliveries(rows, n, rc, cb, ctx);
}

int sq_webhook_delivery_get(struct eph_store *base, const char *org_id, const char *webhook_id,
                            const char *event_id, struct eph_webhook_delivery *out)
{
    struct sq_conn *s = READER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = sq_prepare(s,
                        "SELECT " DELIVERY_COLUMNS " FROM webhook_deliveries d WHERE "
                        "d.org_id = ?1 AND d.webhook_id = ?2 AND d.event_id = ?3",
                        &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, webhook_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 3, event_id, -1, SQLITE_TRANSIENT);
        int r = sqlite3_step(st);
        rc = r == SQLITE_ROW    ? row_to_delivery(st, out)
             : r == SQLITE_DONE ? -ENOENT
                                : sq_db_err(s, r, "webhook delivery");
        sq_done(st);
    }
    pthread_mutex_unlock(&s->lock);
    if (rc && rc != -ENOENT)
        eph_webhook_delivery_release(out);
    return rc;
}

int sq_webhook_attempts(struct eph_store *base, const char *org_id, const char *webhook_id,
                        const char *event_id, unsigned limit, eph_attempt_cb cb, void *ctx)
{
    struct sq_conn *s = READER(base);
    struct eph_webhook_attempt_row *rows = calloc(limit ? limit : 1, sizeof(*rows));
    size_t n = 0;
    if (!rows)
        return -ENOMEM;
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = sq_prepare(s,
                        "SELECT attempt, outcome, at, http_status, duration_ms, error FROM "
                        "(SELECT * FROM webhook_attempts WHERE org_id = ?1 AND webhook_id = ?2 "
                        "AND event_id = ?3 ORDER BY attempt DESC LIMIT ?4) ORDER BY attempt",
                        &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, webhook_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 3, event_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 4, limit);
        int r;
        while (n < limit && (r = sqlite3_step(st)) == SQLITE_ROW) {
            struct eph_webhook_attempt_row *a = &rows[n++];
            a->attempt = (unsigned)sqlite3_column_int64(st, 0);
            snprintf(a->outcome, sizeof(a->outcome), "%s", sqlite3_column_text(st, 1));
            a->at_ms = sqlite3_column_int64(st, 2);
            a->status = sqlite3_column_int(st, 3);
            a->duration_ms = sqlite3_column_int64(st, 4);
            const unsigned char *e = sqlite3_column_text(st, 5);
            snprintf(a->error, sizeof(a->error), "%s", e ? (const char *)e : "");
        }
        if (n < limit && r != SQLITE_DONE)
            rc = sq_db_err(s, r, "webhook attempts");
        sq_done(st);
    }
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; !rc && i < n; i++)
        rc = cb(&rows[i], ctx);
    free(rows);
    return rc;
}

/* The due deliveries, with what sending needs, into rows (at most max). */
static int select_due(struct sq_conn *s, int64_t now_ms, unsigned max,
                      struct eph_webhook_delivery *rows, size_t *n)
{
    sqlite3_stmt *st;
    int rc = sq_prepare(s,
                        "SELECT " DELIVERY_COLUMNS ", d.body, w.url, w.secret, w.timeout_seconds "
                        "FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id WHERE "
                        "d.state = 'pending' AND d.next_attempt_at <= ?1 AND "
                        "(d.claim_expires_at IS NULL OR d.claim_expires_at < ?1) "
                        "ORDER BY d.next_attempt_at, d.event_id LIMIT ?2",
                        &st);
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, now_ms);
    sqlite3_bind_int64(st, 2, max);
    int r = SQLITE_DONE;
    while (*n < max && (r = sqlite3_step(st)) == SQLITE_ROW) {
        struct eph_webhook_delivery *d = &rows[(*n)++];
        if ((rc = row_to_delivery(st, d)))
            break;
        d->body = sq_col_strdup(st, 11);
        d->url = sq_col_strdup(st, 12);
        d->secret_sealed = sq_col_strdup(st, 13);
        d->timeout_seconds = (unsigned)sqlite3_column_int64(st, 14);
        if (!d->body || !d->url || !d->secret_sealed) {
            rc = -ENOMEM;
            break;
        }
    }
    if (!rc && *n < max && r != SQLITE_DONE)
        rc = sq_db_err(s, r, "webhook claim");
    sq_done(st);
    return rc;
}

int sq_webhook_claim(struct eph_store *base, const char *node_id, int64_t now_ms,
                     int64_t claim_until_ms, unsigned max, eph_delivery_cb cb, void *ctx)
{
    struct sq_conn *s = WRITER(base);
    struct eph_webhook_delivery *rows = calloc(max ? max : 1, sizeof(*rows));
    size_t n = 0;
    if (!rows)
        return -ENOMEM;
    pthread_mutex_lock(&s->lock);
    int rc = sq_begin(s);
    if (!rc)
        rc = select_due(s, now_ms, max, rows, &n);
    for (size_t i = 0; !rc && i < n; i++) {
        const char *v[] = {node_id, rows[i].event_id, rows[i].webhook_id};
        rc = exec_texts(s,
                        "UPDATE webhook_deliveries SET claimed_by = ?1, claim_expires_at = ?4 "
                        "WHERE event_id = ?2 AND webhook_id = ?3",
                        v, 3, claim_until_ms, NULL, "webhook claim");
    }
    if (!rc)
        rc = sq_commit(s);
    if (rc)
        sq_rollback(s);
    pthread_mutex_unlock(&s->lock);
    return pass_deliveries(rows, n, rc, cb, ctx);
}

/* The outcome of an attempt, the name the history gives its state. */
static const char *attempt_outcome(const char *state)
{
    return strcmp(state, "pending") == 0 ? "retried" : state;
}

static int record_locked(struct sq_conn *s, const struct eph_webhook_attempt *a)
{
    sqlite3_stmt *st;
    int rc = sq_prepare(s,
                        "UPDATE webhook_deliveries SET state = ?1, attempts = attempts + 1, "
                        "last_attempt_at = ?2, next_attempt_at = CASE WHEN ?1 = 'pending' THEN ?3 "
                        "ELSE next_attempt_at END, last_status = ?4, last_duration_ms = ?5, "
                        "last_error = ?6, claimed_by = NULL, claim_expires_at = NULL, "
                        "body = CASE WHEN ?1 = 'pending' THEN body ELSE '' END "
                        "WHERE event_id = ?7 AND webhook_id = ?8 AND claimed_by = ?9 AND "
                        "state = 'pending'",
                        &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, a->state, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, a->at_ms);
    sqlite3_bind_int64(st, 3, a->next_attempt_at_ms);
    if (a->status)
        sqlite3_bind_int(st, 4, a->status);
    else
        sqlite3_bind_null(st, 4);
    sqlite3_bind_int64(st, 5, a->duration_ms);
    sq_bind_text(st, 6, a->error);
    sqlite3_bind_text(st, 7, a->event_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 8, a->webhook_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 9, a->node_id, -1, SQLITE_TRANSIENT);
    if ((rc = sq_step_done(s, st, "webhook record")))
        return rc;
    if (sqlite3_changes(s->db) == 0)
        return -ESTALE;
    /* The attempt's number is the count the update just made. */
    if ((rc = sq_prepare(s,
                         "INSERT INTO webhook_attempts (event_id, webhook_id, org_id, attempt, "
                         "outcome, at, http_status, duration_ms, error) SELECT event_id, "
                         "webhook_id, org_id, attempts, ?3, last_attempt_at, last_status, "
                         "last_duration_ms, last_error FROM webhook_deliveries WHERE "
                         "event_id = ?1 AND webhook_id = ?2",
                         &st)))
        return rc;
    sqlite3_bind_text(st, 1, a->event_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, a->webhook_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, attempt_outcome(a->state), -1, SQLITE_TRANSIENT);
    return sq_step_done(s, st, "webhook record");
}

int sq_webhook_record(struct eph_store *base, const struct eph_webhook_attempt *a)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    int rc = sq_begin(s);
    if (!rc)
        rc = record_locked(s, a);
    if (!rc)
        rc = sq_commit(s);
    if (rc)
        sq_rollback(s);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* Within run_finish's transaction: one delivery of ev per endpoint of the org that takes its
 * type. */
int sq_webhook_enqueue_locked(struct sq_conn *s, const char *org_id,
                              const struct eph_webhook_event *ev)
{
    const char *v[] = {ev->id, ev->type, ev->body, org_id};
    return exec_texts(s,
                      "INSERT INTO webhook_deliveries (event_id, webhook_id, org_id, type, body, "
                      "state, attempts, created_at, next_attempt_at) SELECT ?1, w.id, w.org_id, "
                      "?2, ?3, 'pending', 0, ?5, ?5 FROM webhooks w WHERE w.org_id = ?4 AND "
                      "w.disabled = 0 AND EXISTS (SELECT 1 FROM json_each(w.events) e WHERE "
                      "e.value = ?2)",
                      v, 4, ev->created_at_ms, NULL, "webhook enqueue");
}
