/*
 * postgres_idem.c - the PostgreSQL store's idempotency records (Stripe semantics, docs/API.md).
 */
#include <errno.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "store/postgres_store.h"
#include "store/store.h"

/* ---- idempotency ---- */

static int idem_begin_once(struct pg_store *s, struct pg_conn *c, const char *org_id,
                           const char *key, const char *request_hash, const char *pending,
                           int64_t now_ms, int64_t expired_before_ms, struct eph_idem *existing)
{
    int rc = pg_begin(s, c);
    if (rc)
        return rc;
    struct params p = {0};
    p_text(&p, org_id);
    p_text(&p, key);
    p_i64(&p, expired_before_ms);
    /* An expired key is gone, whether or not the reaper has come by yet. */
    if ((rc = pg_exec(s, c,
                      "DELETE FROM idempotency WHERE org_id = $1 AND key = $2 AND created_at < $3",
                      &p, NULL, NULL, "idempotency expire key")))
        return rc;
    struct params q = {0};
    p_text(&q, org_id);
    p_text(&q, key);
    p_text(&q, request_hash);
    p_i64(&q, now_ms);
    p_text(&q, pending);
    unsigned long n = 0;
    /* One key sent to two nodes at once: the primary key lets exactly one insert win; the other
     * waits for it to commit and then finds its record. */
    if ((rc = pg_exec(s, c,
                      "INSERT INTO idempotency (org_id, key, request_hash, created_at, "
                      "response_body) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (org_id, key) DO "
                      "NOTHING",
                      &q, NULL, &n, "idempotency insert")))
        return rc;
    if (n == 1)
        return pg_commit(s, c);
    PGresult *r = NULL;
    struct params k = {0};
    p_text(&k, org_id);
    p_text(&k, key);
    if ((rc =
             pg_exec(s, c,
                     "SELECT request_hash, status_code, response_body, created_at FROM idempotency "
                     "WHERE org_id = $1 AND key = $2",
                     &k, &r, NULL, "idempotency lookup")))
        return rc;
    if (PQntuples(r)) {
        pg_col_copy(r, 0, 0, existing->request_hash, sizeof(existing->request_hash));
        existing->status_code = (int)pg_col_i64(r, 0, 1);
        rc = pg_col_dup(r, 0, 2, &existing->response_body) ? -ENOMEM : -EEXIST;
        existing->created_at_ms = pg_col_i64(r, 0, 3);
    } else {
        rc = -EBUSY; /* abandoned between our insert and our read: the client retries */
    }
    PQclear(r);
    return rc;
}

int pg_idem_begin(struct eph_store *base, const char *org_id, const char *key,
                  const char *request_hash, const char *pending, int64_t now_ms,
                  int64_t expired_before_ms, struct eph_idem *existing)
{
    struct pg_store *s = P(base);
    return WITH_CONN(s, idem_begin_once(s, c, org_id, key, request_hash, pending, now_ms,
                                        expired_before_ms, existing));
}

int pg_idem_complete(struct eph_store *base, const char *org_id, const char *key, int status_code,
                     const char *body)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_i64(&p, status_code);
    p_text(&p, body);
    p_text(&p, org_id);
    p_text(&p, key);
    unsigned long n = 0;
    return WITH_CONN(s,
                     pg_changed_once(s, c,
                                     "UPDATE idempotency SET status_code = $1, response_body = $2 "
                                     "WHERE org_id = $3 AND key = $4",
                                     &p, &n, "idempotency complete"));
}

int pg_idem_abandon(struct eph_store *base, const char *org_id, const char *key)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, org_id);
    p_text(&p, key);
    unsigned long n = 0;
    return WITH_CONN(s,
                     pg_changed_once(s, c,
                                     "DELETE FROM idempotency WHERE org_id = $1 AND key = $2 AND "
                                     "status_code = 0",
                                     &p, &n, "idempotency abandon"));
}

int pg_idem_expire(struct eph_store *base, int64_t cutoff_ms)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_i64(&p, cutoff_ms);
    unsigned long n = 0;
    return WITH_CONN(s, pg_changed_once(s, c, "DELETE FROM idempotency WHERE created_at < $1", &p,
                                        &n, "idempotency expire"));
}

static int idem_recover_once(struct pg_store *s, struct pg_conn *c, int64_t stale_before_ms,
                             unsigned long *completed, unsigned long *dropped)
{
    struct params none = {0};
    /* A pending body is the create's own answer: completing it is setting its status. Bodies
     * are JSON (pending or answered), so the cast never fails. */
    int rc = pg_exec(s, c,
                     "UPDATE idempotency i SET status_code = 201 WHERE status_code = 0 AND "
                     "response_body IS NOT NULL AND EXISTS (SELECT 1 FROM runs r WHERE "
                     "r.org_id = i.org_id AND r.id = i.response_body::json->>'id')",
                     &none, NULL, completed, "idempotency recover");
    if (rc)
        return rc;
    struct params p = {0};
    p_i64(&p, stale_before_ms);
    return pg_exec(
        s, c,
        "DELETE FROM idempotency i WHERE status_code = 0 AND response_body IS NOT NULL AND "
        "created_at < $1 AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.org_id = i.org_id "
        "AND r.id = i.response_body::json->>'id')",
        &p, NULL, dropped, "idempotency drop stale");
}

int pg_idem_recover(struct eph_store *base, int64_t stale_before_ms, unsigned *completed,
                    unsigned *dropped)
{
    struct pg_store *s = P(base);
    unsigned long done = 0, gone = 0;
    int rc = WITH_CONN(s, idem_recover_once(s, c, stale_before_ms, &done, &gone));
    *completed = (unsigned)done;
    *dropped = (unsigned)gone;
    return rc;
}
