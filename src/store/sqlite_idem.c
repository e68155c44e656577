/*
 * sqlite_idem.c - the SQLite store's idempotency records (Stripe semantics, docs/API.md).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "store/sqlite_store.h"
#include "store/store.h"

int sq_idem_begin(struct eph_store *base, const char *org_id, const char *key,
                  const char *request_hash, const char *pending, int64_t now_ms,
                  int64_t expired_before_ms, struct eph_idem *existing)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    int rc = sq_begin(s);
    if (rc)
        goto out;
    sqlite3_stmt *st;
    /* An expired key is gone, whether or not the reaper has come by yet. */
    if ((rc = sq_prepare(
             s, "DELETE FROM idempotency WHERE org_id = ? AND key = ? AND created_at < ?", &st)))
        goto fail;
    sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, key, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 3, expired_before_ms);
    if ((rc = sq_step_done(s, st, "idempotency expire key")))
        goto fail;
    if ((rc = sq_prepare(s,
                         "SELECT request_hash, status_code, response_body, created_at FROM "
                         "idempotency WHERE org_id = ? AND key = ?",
                         &st)))
        goto fail;
    sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, key, -1, SQLITE_TRANSIENT);
    int r = sqlite3_step(st);
    if (r == SQLITE_ROW) {
        snprintf(existing->request_hash, sizeof(existing->request_hash), "%s",
                 sqlite3_column_text(st, 0));
        existing->status_code = sqlite3_column_int(st, 1);
        rc = sq_col_dup(st, 2, &existing->response_body) ? -ENOMEM : -EEXIST;
        existing->created_at_ms = sqlite3_column_int64(st, 3);
        sq_done(st);
        goto fail;
    }
    sq_done(st);
    if (r != SQLITE_DONE) {
        rc = sq_db_err(s, r, "idempotency lookup");
        goto fail;
    }
    if ((rc = sq_prepare(s,
                         "INSERT INTO idempotency (org_id, key, request_hash, created_at, "
                         "response_body) VALUES (?, ?, ?, ?, ?)",
                         &st)))
        goto fail;
    sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, key, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, request_hash, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 4, now_ms);
    if (pending)
        sqlite3_bind_text(st, 5, pending, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, 5);
    if ((rc = sq_step_done(s, st, "idempotency insert")) || (rc = sq_commit(s)))
        goto fail;
    goto out;
fail:
    sq_rollback(s);
out:
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sq_idem_complete(struct eph_store *base, const char *org_id, const char *key, int status_code,
                     const char *body)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = sq_prepare(s,
                        "UPDATE idempotency SET status_code = ?, response_body = ? "
                        "WHERE org_id = ? AND key = ?",
                        &st);
    if (!rc) {
        sqlite3_bind_int(st, 1, status_code);
        sqlite3_bind_text(st, 2, body, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 3, org_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 4, key, -1, SQLITE_TRANSIENT);
        rc = sq_step_done(s, st, "idempotency complete");
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sq_idem_abandon(struct eph_store *base, const char *org_id, const char *key)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = sq_prepare(
        s, "DELETE FROM idempotency WHERE org_id = ? AND key = ? AND status_code = 0", &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, key, -1, SQLITE_TRANSIENT);
        rc = sq_step_done(s, st, "idempotency abandon");
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sq_idem_expire(struct eph_store *base, int64_t cutoff_ms)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = sq_prepare(s, "DELETE FROM idempotency WHERE created_at < ?", &st);
    if (!rc) {
        sqlite3_bind_int64(st, 1, cutoff_ms);
        rc = sq_step_done(s, st, "idempotency expire");
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sq_idem_recover(struct eph_store *base, int64_t stale_before_ms, unsigned *completed,
                    unsigned *dropped)
{
    struct sq_conn *s = WRITER(base);
    *completed = *dropped = 0;
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    /* A pending body is the create's own answer: completing it is setting its status. */
    int rc = sq_prepare(s,
                        "UPDATE idempotency SET status_code = 201 WHERE status_code = 0 AND "
                        "response_body IS NOT NULL AND EXISTS (SELECT 1 FROM runs WHERE "
                        "runs.org_id = idempotency.org_id AND "
                        "runs.id = json_extract(idempotency.response_body, '$.id'))",
                        &st);
    if (!rc && !(rc = sq_step_done(s, st, "idempotency recover")))
        *completed = (unsigned)sqlite3_changes(s->db);
    if (!rc && !(rc = sq_prepare(s,
                                 "DELETE FROM idempotency WHERE status_code = 0 AND "
                                 "response_body IS NOT NULL AND created_at < ? AND NOT EXISTS "
                                 "(SELECT 1 FROM runs WHERE runs.org_id = idempotency.org_id AND "
                                 "runs.id = json_extract(idempotency.response_body, '$.id'))",
                                 &st))) {
        sqlite3_bind_int64(st, 1, stale_before_ms);
        if (!(rc = sq_step_done(s, st, "idempotency drop stale")))
            *dropped = (unsigned)sqlite3_changes(s->db);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}
