/*
 * sqlite_orgs.c - the SQLite store's orgs, keys, connections, ledger and balances (sqlite.c has the
 * connections and the rules they follow).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "common/clock.h"
#include "common/id.h"
#include "store/sqlite_store.h"
#include "store/store.h"

/* Appends a ledger entry and moves the org's running totals in the same transaction (the caller's).
 * balance = credits - charges, reserved = reserves - charges - releases. A credit that would take
 * the balance past what 64 bits hold is refused (-EOVERFLOW), so the totals always fit. */
int sq_insert_ledger(struct sq_conn *s, const char *org_id, const char *run_id, const char *kind,
                     int64_t micros, int64_t now)
{
    int64_t dbal = 0, dres = 0;
    if (strcmp(kind, "credit") == 0)
        dbal = micros;
    else if (strcmp(kind, "reserve") == 0)
        dres = micros;
    else if (strcmp(kind, "charge") == 0)
        dbal = dres = -micros;
    else
        dres = -micros;
    sqlite3_stmt *st;
    int rc = sq_prepare(s,
                        "UPDATE orgs SET balance_micros = balance_micros + ?1, "
                        "reserved_micros = reserved_micros + ?2 WHERE id = ?3 AND "
                        "(?1 <= 0 OR balance_micros <= 9223372036854775807 - ?1)",
                        &st);
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, dbal);
    sqlite3_bind_int64(st, 2, dres);
    sqlite3_bind_text(st, 3, org_id, -1, SQLITE_TRANSIENT);
    if ((rc = sq_step_done(s, st, "balance update")))
        return rc;
    if (sqlite3_changes(s->db) == 0) {
        /* No row: either no such org, or the credit would overflow. */
        if ((rc = sq_prepare(s, "SELECT 1 FROM orgs WHERE id = ?", &st)))
            return rc;
        sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
        int have = sqlite3_step(st) == SQLITE_ROW;
        sq_done(st);
        return have ? -EOVERFLOW : -ENOENT;
    }
    if ((rc = sq_prepare(s,
                         "INSERT INTO ledger (org_id, run_id, kind, micros, created_at) "
                         "VALUES (?, ?, ?, ?, ?)",
                         &st)))
        return rc;
    sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
    sq_bind_text(st, 2, run_id);
    sqlite3_bind_text(st, 3, kind, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, micros);
    sqlite3_bind_int64(st, 5, now);
    return sq_step_done(s, st, "ledger insert");
}

static int sq_org_find_locked(struct sq_conn *s, const char *name, char *org_id, size_t idlen)
{
    sqlite3_stmt *st;
    int rc = sq_prepare(s, "SELECT id FROM orgs WHERE name = ?", &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        snprintf(org_id, idlen, "%s", sqlite3_column_text(st, 0));
        rc = 0;
    } else {
        rc = rc == SQLITE_DONE ? -ENOENT : sq_db_err(s, rc, "org find");
    }
    sq_done(st);
    return rc;
}

int sq_org_find(struct eph_store *base, const char *name, char *org_id, size_t idlen)
{
    struct sq_conn *s = READER(base);
    pthread_mutex_lock(&s->lock);
    int rc = sq_org_find_locked(s, name, org_id, idlen);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sq_org_ensure(struct eph_store *base, const char *name, int64_t initial_credit, char *org_id,
                  size_t idlen, bool *created)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    *created = false;
    int rc = sq_begin(s);
    if (rc)
        goto out;
    rc = sq_org_find_locked(s, name, org_id, idlen);
    if (rc != -ENOENT) {
        if (rc)
            sq_rollback(s);
        else
            rc = sq_commit(s);
        goto out;
    }
    char id[48];
    if ((rc = eph_id_hex("org_", 12, id, sizeof(id))))
        goto fail;
    sqlite3_stmt *st;
    if ((rc = sq_prepare(s, "INSERT INTO orgs (id, name, created_at) VALUES (?, ?, ?)", &st)))
        goto fail;
    int64_t now = eph_clock_real_ms();
    sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 3, now);
    if ((rc = sq_step_done(s, st, "org insert")))
        goto fail;
    if (initial_credit > 0 && (rc = sq_insert_ledger(s, id, NULL, "credit", initial_credit, now)))
        goto fail;
    if ((rc = sq_commit(s)))
        goto fail;
    snprintf(org_id, idlen, "%s", id);
    *created = true;
    goto out;
fail:
    sq_rollback(s);
out:
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sq_credit_add(struct eph_store *base, const char *org_id, int64_t micros)
{
    struct sq_conn *s = WRITER(base);
    if (micros <= 0)
        return -EINVAL;
    pthread_mutex_lock(&s->lock);
    int rc = sq_begin(s);
    if (!rc) {
        rc = sq_insert_ledger(s, org_id, NULL, "credit", micros, eph_clock_real_ms());
        if (!rc)
            rc = sq_commit(s);
        if (rc)
            sq_rollback(s);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sq_key_insert(struct eph_store *base, const char *org_id, const char *key_hash,
                  const char *role, const char *prefix, char *key_id, size_t idlen)
{
    struct sq_conn *s = WRITER(base);
    char id[48];
    int rc = eph_id_hex("key_", 12, id, sizeof(id));
    if (rc)
        return rc;
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    rc = sq_prepare(s,
                    "INSERT INTO api_keys (id, org_id, key_hash, role, created_at, prefix) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, org_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 3, key_hash, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 4, role, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 5, eph_clock_real_ms());
        sq_bind_text(st, 6, prefix);
        rc = sq_step_done(s, st, "key insert");
    }
    pthread_mutex_unlock(&s->lock);
    if (!rc && key_id)
        snprintf(key_id, idlen, "%s", id);
    return rc;
}

int sq_key_lookup(struct eph_store *base, const char *key_hash, char *org_id, size_t idlen,
                  char *role, size_t rolelen)
{
    struct sq_conn *s = READER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    /* The lookup is by the hash of the key, so its timing reveals nothing about the key. */
    int rc = sq_prepare(
        s, "SELECT org_id, role FROM api_keys WHERE key_hash = ? AND revoked_at IS NULL", &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, key_hash, -1, SQLITE_TRANSIENT);
        int r = sqlite3_step(st);
        if (r == SQLITE_ROW) {
            snprintf(org_id, idlen, "%s", sqlite3_column_text(st, 0));
            snprintf(role, rolelen, "%s", sqlite3_column_text(st, 1));
        } else {
            rc = r == SQLITE_DONE ? -ENOENT : sq_db_err(s, r, "key lookup");
        }
        sq_done(st);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sq_key_list(struct eph_store *base, const char *org_id, eph_key_cb cb, void *ctx)
{
    struct sq_conn *s = READER(base);
    struct eph_key_info *rows = NULL;
    size_t n = 0, cap = 0;
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = sq_prepare(s,
                        "SELECT id, role, COALESCE(prefix, ''), created_at FROM api_keys "
                        "WHERE org_id = ? AND revoked_at IS NULL ORDER BY created_at, id",
                        &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
        int r;
        while ((r = sqlite3_step(st)) == SQLITE_ROW) {
            if (n == cap) {
                size_t ncap = cap ? cap * 2 : 16;
                struct eph_key_info *p = realloc(rows, ncap * sizeof(*rows));
                if (!p) {
                    rc = -ENOMEM;
                    break;
                }
                rows = p;
                cap = ncap;
            }
            struct eph_key_info *k = &rows[n++];
            memset(k, 0, sizeof(*k));
            snprintf(k->id, sizeof(k->id), "%s", sqlite3_column_text(st, 0));
            snprintf(k->role, sizeof(k->role), "%s", sqlite3_column_text(st, 1));
            snprintf(k->prefix, sizeof(k->prefix), "%s", sqlite3_column_text(st, 2));
            k->created_at_ms = sqlite3_column_int64(st, 3);
        }
        if (!rc && r != SQLITE_DONE)
            rc = sq_db_err(s, r, "key list");
        sq_done(st);
    }
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < n && !rc; i++)
        rc = cb(&rows[i], ctx);
    free(rows);
    return rc;
}

int sq_key_revoke(struct eph_store *base, const char *org_id, const char *key_id, int64_t now_ms)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = sq_prepare(s,
                        "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND org_id = ? AND "
                        "revoked_at IS NULL",
                        &st);
    if (!rc) {
        sqlite3_bind_int64(st, 1, now_ms);
        sqlite3_bind_text(st, 2, key_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 3, org_id, -1, SQLITE_TRANSIENT);
        rc = sq_step_done(s, st, "key revoke");
        if (!rc && sqlite3_changes(s->db) == 0)
            rc = -ENOENT;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sq_conn_insert(struct eph_store *base, const char *org_id, const struct eph_connection *c,
                   char *conn_id, size_t idlen)
{
    struct sq_conn *s = WRITER(base);
    char id[48];
    int rc = eph_id_hex("conn_", 12, id, sizeof(id));
    if (rc)
        return rc;
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    rc = sq_prepare(s,
                    "INSERT INTO connections (id, org_id, name, base_url, methods, path_prefixes, "
                    "header_names, sealed_headers, created_at, query_names) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, org_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 3, c->name, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 4, c->base_url, -1, SQLITE_TRANSIENT);
        sq_bind_json(st, 5, c->methods);
        sq_bind_json(st, 6, c->path_prefixes);
        sq_bind_json(st, 7, c->header_names);
        sqlite3_bind_blob(st, 8, c->sealed, (int)c->sealed_len, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 9, c->created_at_ms);
        if (c->query_names)
            sq_bind_json(st, 10, c->query_names);
        else
            sqlite3_bind_text(st, 10, "[]", -1, SQLITE_STATIC);
        rc = sq_step_done(s, st, "connection insert");
    }
    pthread_mutex_unlock(&s->lock);
    if (!rc && conn_id)
        snprintf(conn_id, idlen, "%s", id);
    return rc;
}

#define CONN_COLUMNS                                                                               \
    "id, name, base_url, methods, path_prefixes, header_names, sealed_headers, created_at, "       \
    "query_names"

static int row_to_conn(sqlite3_stmt *st, struct eph_connection *c)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->id, sizeof(c->id), "%s", sqlite3_column_text(st, 0));
    snprintf(c->name, sizeof(c->name), "%s", sqlite3_column_text(st, 1));
    c->base_url = sq_col_strdup(st, 2);
    c->methods = sq_col_json(st, 3);
    c->path_prefixes = sq_col_json(st, 4);
    c->header_names = sq_col_json(st, 5);
    int n = sqlite3_column_bytes(st, 6);
    const void *b = sqlite3_column_blob(st, 6);
    if (n > 0 && b) {
        c->sealed = malloc((size_t)n);
        if (c->sealed) {
            memcpy(c->sealed, b, (size_t)n);
            c->sealed_len = (size_t)n;
        }
    }
    c->created_at_ms = sqlite3_column_int64(st, 7);
    c->query_names = sq_col_json(st, 8);
    if (!c->base_url || !c->methods || !c->path_prefixes || !c->header_names || !c->query_names ||
        (n > 0 && !c->sealed)) {
        eph_connection_release(c);
        return -ENOMEM;
    }
    return 0;
}

int sq_conn_list(struct eph_store *base, const char *org_id, eph_conn_cb cb, void *ctx)
{
    struct sq_conn *s = READER(base);
    struct eph_connection *rows = NULL;
    size_t n = 0, cap = 0;
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = sq_prepare(
        s, "SELECT " CONN_COLUMNS " FROM connections WHERE org_id = ? ORDER BY name", &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
        int r;
        while ((r = sqlite3_step(st)) == SQLITE_ROW) {
            if (n == cap) {
                size_t ncap = cap ? cap * 2 : 16;
                struct eph_connection *p = realloc(rows, ncap * sizeof(*rows));
                if (!p) {
                    rc = -ENOMEM;
                    break;
                }
                rows = p;
                cap = ncap;
            }
            if ((rc = row_to_conn(st, &rows[n])))
                break;
            n++;
        }
        if (!rc && r != SQLITE_DONE)
            rc = sq_db_err(s, r, "connection list");
        sq_done(st);
    }
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < n; i++) {
        if (!rc)
            rc = cb(&rows[i], ctx);
        eph_connection_release(&rows[i]);
    }
    free(rows);
    return rc;
}

int sq_conn_get(struct eph_store *base, const char *org_id, const char *name,
                struct eph_connection *out)
{
    struct sq_conn *s = READER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = sq_prepare(s, "SELECT " CONN_COLUMNS " FROM connections WHERE org_id = ? AND name = ?",
                        &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, name, -1, SQLITE_TRANSIENT);
        int r = sqlite3_step(st);
        if (r == SQLITE_ROW)
            rc = row_to_conn(st, out);
        else
            rc = r == SQLITE_DONE ? -ENOENT : sq_db_err(s, r, "connection get");
        sq_done(st);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sq_conn_delete(struct eph_store *base, const char *org_id, const char *name_or_id)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc =
        sq_prepare(s, "DELETE FROM connections WHERE org_id = ?1 AND (name = ?2 OR id = ?2)", &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, name_or_id, -1, SQLITE_TRANSIENT);
        rc = sq_step_done(s, st, "connection delete");
        if (!rc && sqlite3_changes(s->db) == 0)
            rc = -ENOENT;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sq_ledger_totals_locked(struct sq_conn *s, const char *org_id, int64_t *credits,
                                   int64_t *reserves, int64_t *charges, int64_t *releases)
{
    sqlite3_stmt *st;
    int rc = sq_prepare(s,
                        "SELECT "
                        " COALESCE(SUM(CASE WHEN kind = 'credit' THEN micros END), 0),"
                        " COALESCE(SUM(CASE WHEN kind = 'reserve' THEN micros END), 0),"
                        " COALESCE(SUM(CASE WHEN kind = 'charge' THEN micros END), 0),"
                        " COALESCE(SUM(CASE WHEN kind = 'release' THEN micros END), 0) "
                        "FROM ledger WHERE org_id = ?",
                        &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *credits = sqlite3_column_int64(st, 0);
        *reserves = sqlite3_column_int64(st, 1);
        *charges = sqlite3_column_int64(st, 2);
        *releases = sqlite3_column_int64(st, 3);
        rc = 0;
    } else {
        rc = sq_db_err(s, rc, "ledger totals");
    }
    sq_done(st);
    return rc;
}

int sq_balance_locked(struct sq_conn *s, const char *org_id, struct eph_balance *out)
{
    sqlite3_stmt *st;
    int rc = sq_prepare(s, "SELECT balance_micros, reserved_micros FROM orgs WHERE id = ?", &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        out->balance_micros = sqlite3_column_int64(st, 0);
        out->reserved_micros = sqlite3_column_int64(st, 1);
        out->available_micros = out->balance_micros - out->reserved_micros;
        rc = 0;
    } else {
        rc = rc == SQLITE_DONE ? -ENOENT : sq_db_err(s, rc, "balance");
    }
    sq_done(st);
    return rc;
}

int sq_balance(struct eph_store *base, const char *org_id, struct eph_balance *out)
{
    struct sq_conn *s = READER(base);
    pthread_mutex_lock(&s->lock);
    int rc = sq_balance_locked(s, org_id, out);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sq_ledger_totals(struct eph_store *base, const char *org_id, int64_t *credits,
                     int64_t *reserves, int64_t *charges, int64_t *releases)
{
    struct sq_conn *s = READER(base);
    pthread_mutex_lock(&s->lock);
    int rc = sq_ledger_totals_locked(s, org_id, credits, reserves, charges, releases);
    pthread_mutex_unlock(&s->lock);
    return rc;
}
