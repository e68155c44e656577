/*
 * postgres_webhooks.c - the PostgreSQL store's webhooks (docs/WEBHOOKS.md): endpoints, the
 * deliveries a settlement queues, their claims (FOR UPDATE SKIP LOCKED, so that each is sent by
 * one node) and the outcome of each attempt.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "store/postgres_store.h"
#include "store/store.h"

#define WEBHOOK_COLUMNS "id, org_id, url, events, timeout_seconds, created_at"
#define DELIVERY_COLUMNS                                                                           \
    "d.event_id, d.webhook_id, d.type, d.state, d.attempts, d.created_at, d.next_attempt_at, "     \
    "d.last_attempt_at, d.last_status, d.last_error, d.last_duration_ms"

static int row_to_webhook(const PGresult *r, int i, struct eph_webhook *w)
{
    memset(w, 0, sizeof(*w));
    pg_col_copy(r, i, 0, w->id, sizeof(w->id));
    pg_col_copy(r, i, 1, w->org_id, sizeof(w->org_id));
    w->url = pg_col_strdup(r, i, 2);
    w->events = pg_col_json(r, i, 3);
    w->timeout_seconds = (unsigned)pg_col_i64(r, i, 4);
    w->created_at_ms = pg_col_i64(r, i, 5);
    if (!w->url || !w->events) {
        eph_webhook_release(w);
        return -ENOMEM;
    }
    return 0;
}

static int row_to_delivery(const PGresult *r, int i, struct eph_webhook_delivery *d)
{
    memset(d, 0, sizeof(*d));
    pg_col_copy(r, i, 0, d->event_id, sizeof(d->event_id));
    pg_col_copy(r, i, 1, d->webhook_id, sizeof(d->webhook_id));
    pg_col_copy(r, i, 2, d->type, sizeof(d->type));
    pg_col_copy(r, i, 3, d->state, sizeof(d->state));
    d->attempts = (unsigned)pg_col_i64(r, i, 4);
    d->created_at_ms = pg_col_i64(r, i, 5);
    d->next_attempt_at_ms = pg_col_i64(r, i, 6);
    d->last_attempt_at_ms = pg_isnull(r, i, 7) ? 0 : pg_col_i64(r, i, 7);
    d->last_status = pg_isnull(r, i, 8) ? 0 : (int)pg_col_i64(r, i, 8);
    d->last_error = pg_isnull(r, i, 9) ? NULL : pg_col_strdup(r, i, 9);
    d->last_duration_ms = pg_isnull(r, i, 10) ? 0 : pg_col_i64(r, i, 10);
    if (!pg_isnull(r, i, 9) && !d->last_error)
        return -ENOMEM;
    return 0;
}

int pg_webhook_insert(struct eph_store *base, const struct eph_webhook *w)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, w->id);
    p_text(&p, w->org_id);
    p_text(&p, w->url);
    p_json(&p, w->events, "[]");
    p_text(&p, w->secret_sealed);
    p_i64(&p, w->timeout_seconds);
    p_i64(&p, w->created_at_ms);
    unsigned long n = 0;
    int rc = WITH_CONN(s, pg_changed_once(s, c,
                                          "INSERT INTO webhooks (id, org_id, url, events, secret, "
                                          "timeout_seconds, created_at) VALUES ($1, $2, $3, $4, "
                                          "$5, $6, $7)",
                                          &p, &n, "webhook insert"));
    p_free(&p);
    return rc;
}

int pg_webhook_list(struct eph_store *base, const char *org_id, eph_webhook_cb cb, void *ctx)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, org_id);
    p_i64(&p, EPH_WEBHOOKS_PER_ORG);
    PGresult *r = NULL;
    int rc = WITH_CONN(s, pg_select_once(s, c,
                                         "SELECT " WEBHOOK_COLUMNS " FROM webhooks WHERE "
                                         "org_id = $1 AND NOT disabled ORDER BY created_at, id "
                                         "LIMIT $2",
                                         &p, &r, "webhook list"));
    for (int i = 0; !rc && i < PQntuples(r); i++) {
        struct eph_webhook w;
        if (!(rc = row_to_webhook(r, i, &w))) {
            rc = cb(&w, ctx);
            eph_webhook_release(&w);
        }
    }
    PQclear(r);
    return rc;
}

int pg_webhook_get(struct eph_store *base, const char *org_id, const char *id,
                   struct eph_webhook *out)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, org_id);
    p_text(&p, id);
    PGresult *r = NULL;
    int rc = WITH_CONN(s, pg_select_once(s, c,
                                         "SELECT " WEBHOOK_COLUMNS " FROM webhooks WHERE "
                                         "org_id = $1 AND id = $2 AND NOT disabled",
                                         &p, &r, "webhook get"));
    if (!rc)
        rc = PQntuples(r) ? row_to_webhook(r, 0, out) : -ENOENT;
    PQclear(r);
    return rc;
}

static int delete_once(struct pg_store *s, struct pg_conn *c, struct params *p)
{
    int rc = pg_begin(s, c);
    if (rc)
        return rc;
    unsigned long n = 0;
    if ((rc = pg_exec(s, c,
                      "UPDATE webhooks SET disabled = TRUE, secret = '' WHERE org_id = $1 AND "
                      "id = $2 AND NOT disabled AND $3::bigint IS NOT NULL",
                      p, NULL, &n, "webhook delete")))
        return rc;
    if (n == 0)
        return -ENOENT;
    if ((rc = pg_exec(s, c,
                      "UPDATE webhook_deliveries SET state = 'failed', body = '', "
                      "last_error = 'endpoint deleted', last_attempt_at = $3, claimed_by = NULL, "
                      "claim_expires_at = NULL WHERE org_id = $1 AND webhook_id = $2 AND "
                      "state = 'pending'",
                      p, NULL, NULL, "webhook delete")))
        return rc;
    return pg_commit(s, c);
}

int pg_webhook_delete(struct eph_store *base, const char *org_id, const char *id, int64_t now_ms)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, org_id);
    p_text(&p, id);
    p_i64(&p, now_ms);
    return WITH_CONN(s, delete_once(s, c, &p));
}

int pg_webhook_deliveries(struct eph_store *base, const char *org_id, const char *webhook_id,
                          unsigned limit, const char *after, eph_delivery_cb cb, void *ctx,
                          bool *has_more)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, org_id);
    p_text(&p, webhook_id);
    p_i64(&p, (int64_t)limit + 1);
    p_text(&p, after);
    PGresult *r = NULL;
    /* One row past the page tells whether another follows. */
    int rc = WITH_CONN(
        s, pg_select_once(s, c,
                          "SELECT " DELIVERY_COLUMNS " FROM webhook_deliveries d WHERE "
                          "d.org_id = $1 AND d.webhook_id = $2 AND ($4::text IS NULL OR "
                          "(d.created_at, d.event_id) < (SELECT a.created_at, a.event_id FROM "
                          "webhook_deliveries a WHERE a.org_id = $1 AND a.webhook_id = $2 AND "
                          "a.event_id = $4)) ORDER BY d.created_at DESC, d.event_id DESC LIMIT $3",
                          &p, &r, "webhook deliveries"));
    int rows = rc ? 0 : PQntuples(r);
    for (int i = 0; !rc && i < rows && i < (int)limit; i++) {
        struct eph_webhook_delivery d;
        rc = row_to_delivery(r, i, &d);
        if (!rc)
            rc = cb(&d, ctx);
        eph_webhook_delivery_release(&d);
    }
    if (has_more)
        *has_more = !rc && rows > (int)limit;
    PQclear(r);
    return rc;
}

int pg_webhook_delivery_get(struct eph_store *base, const char *org_id, const char *webhook_id,
                            const char *event_id, struct eph_webhook_delivery *out)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, org_id);
    p_text(&p, webhook_id);
    p_text(&p, event_id);
    PGresult *r = NULL;
    int rc = WITH_CONN(s, pg_select_once(s, c,
                                         "SELECT " DELIVERY_COLUMNS " FROM webhook_deliveries d "
                                         "WHERE d.org_id = $1 AND d.webhook_id = $2 AND "
                                         "d.event_id = $3",
                                         &p, &r, "webhook delivery"));
    if (!rc)
        rc = PQntuples(r) ? row_to_delivery(r, 0, out) : -ENOENT;
    if (rc && rc != -ENOENT)
        eph_webhook_delivery_release(out);
    PQclear(r);
    return rc;
}

int pg_webhook_attempts(struct eph_store *base, const char *org_id, const char *webhook_id,
                        const char *event_id, unsigned limit, eph_attempt_cb cb, void *ctx)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, org_id);
    p_text(&p, webhook_id);
    p_text(&p, event_id);
    p_i64(&p, limit);
    PGresult *r = NULL;
    int rc = WITH_CONN(
        s, pg_select_once(s, c,
                          "SELECT attempt, outcome, at, http_status, duration_ms, error FROM "
                          "(SELECT * FROM webhook_attempts WHERE org_id = $1 AND webhook_id = $2 "
                          "AND event_id = $3 ORDER BY attempt DESC LIMIT $4) h ORDER BY attempt",
                          &p, &r, "webhook attempts"));
    for (int i = 0; !rc && i < PQntuples(r); i++) {
        struct eph_webhook_attempt_row a = {0};
        a.attempt = (unsigned)pg_col_i64(r, i, 0);
        pg_col_copy(r, i, 1, a.outcome, sizeof(a.outcome));
        a.at_ms = pg_col_i64(r, i, 2);
        a.status = pg_isnull(r, i, 3) ? 0 : (int)pg_col_i64(r, i, 3);
        a.duration_ms = pg_col_i64(r, i, 4);
        if (!pg_isnull(r, i, 5))
            pg_col_copy(r, i, 5, a.error, sizeof(a.error));
        rc = cb(&a, ctx);
    }
    PQclear(r);
    return rc;
}

int pg_webhook_claim(struct eph_store *base, const char *node_id, int64_t now_ms,
                     int64_t claim_until_ms, unsigned max, eph_delivery_cb cb, void *ctx)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, node_id);
    p_i64(&p, now_ms);
    p_i64(&p, claim_until_ms);
    p_i64(&p, max);
    PGresult *r = NULL;
    /* The choice and the claim are one statement; rows another node is claiming are skipped. */
    int rc = WITH_CONN(
        s, pg_select_once(
               s, c,
               "WITH due AS (SELECT event_id, webhook_id FROM webhook_deliveries "
               "WHERE state = 'pending' AND next_attempt_at <= $2 AND "
               "(claim_expires_at IS NULL OR claim_expires_at < $2) "
               "ORDER BY next_attempt_at, event_id LIMIT $4 FOR UPDATE SKIP LOCKED) "
               "UPDATE webhook_deliveries d SET claimed_by = $1, claim_expires_at = $3 "
               "FROM due, webhooks w WHERE d.event_id = due.event_id AND "
               "d.webhook_id = due.webhook_id AND w.id = d.webhook_id RETURNING " DELIVERY_COLUMNS
               ", d.body, w.url, w.secret, w.timeout_seconds",
               &p, &r, "webhook claim"));
    for (int i = 0; !rc && i < PQntuples(r); i++) {
        struct eph_webhook_delivery d;
        rc = row_to_delivery(r, i, &d);
        if (!rc) {
            d.body = pg_col_strdup(r, i, 11);
            d.url = pg_col_strdup(r, i, 12);
            d.secret_sealed = pg_col_strdup(r, i, 13);
            d.timeout_seconds = (unsigned)pg_col_i64(r, i, 14);
            rc = d.body && d.url && d.secret_sealed ? cb(&d, ctx) : -ENOMEM;
        }
        eph_webhook_delivery_release(&d);
    }
    PQclear(r);
    return rc;
}

int pg_webhook_record(struct eph_store *base, const struct eph_webhook_attempt *a)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, a->state);
    p_i64(&p, a->at_ms);
    p_i64(&p, a->next_attempt_at_ms);
    if (a->status)
        p_i64(&p, a->status);
    else
        p_text(&p, NULL);
    p_i64(&p, a->duration_ms);
    p_text(&p, a->error);
    p_text(&p, a->event_id);
    p_text(&p, a->webhook_id);
    p_text(&p, a->node_id);
    p_text(&p, strcmp(a->state, "pending") == 0 ? "retried" : a->state);
    unsigned long n = 0;
    /* The outcome and its row of the history in one statement: the attempt's number is the
     * count the update makes. */
    int rc = WITH_CONN(
        s, pg_changed_once(s, c,
                           "WITH u AS (UPDATE webhook_deliveries SET state = $1, "
                           "attempts = attempts + 1, last_attempt_at = $2, next_attempt_at = "
                           "CASE WHEN $1 = 'pending' THEN $3::bigint ELSE next_attempt_at END, "
                           "last_status = $4, last_duration_ms = $5, last_error = $6, "
                           "claimed_by = NULL, claim_expires_at = NULL, body = CASE WHEN "
                           "$1 = 'pending' THEN body ELSE '' END WHERE event_id = $7 AND "
                           "webhook_id = $8 AND claimed_by = $9 AND state = 'pending' RETURNING "
                           "event_id, webhook_id, org_id, attempts, last_attempt_at, last_status, "
                           "last_duration_ms, last_error) INSERT INTO webhook_attempts "
                           "(event_id, webhook_id, org_id, attempt, outcome, at, http_status, "
                           "duration_ms, error) SELECT event_id, webhook_id, org_id, attempts, "
                           "$10, last_attempt_at, last_status, last_duration_ms, last_error "
                           "FROM u",
                           &p, &n, "webhook record"));
    return rc ? rc : n ? 0 : -ESTALE;
}

const char pg_webhook_enqueue_sql[] =
    "INSERT INTO webhook_deliveries (event_id, webhook_id, org_id, type, body, "
    "state, attempts, created_at, next_attempt_at) SELECT $1, w.id, w.org_id, $2, "
    "$3, 'pending', 0, $5, $5 FROM webhooks w WHERE w.org_id = $4 AND "
    "NOT w.disabled AND jsonb_exists(w.events::jsonb, $2)";

void pg_webhook_enqueue_params(struct params *p, const char *org_id,
                               const struct eph_webhook_event *ev)
{
    p_text(p, ev->id);
    p_text(p, ev->type);
    p_text(p, ev->body);
    p_text(p, org_id);
    p_i64(p, ev->created_at_ms);
}
