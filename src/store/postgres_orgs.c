/*
 * postgres_orgs.c - the PostgreSQL store's orgs, ledger and balances, keys and connections.
 */
#include <errno.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "common/clock.h"
#include "common/id.h"
#include "store/postgres_store.h"
#include "store/store.h"

/* ---- orgs, ledger, balance ---- */

/* Appends a ledger entry and moves the org's running totals, inside the caller's transaction. A
 * credit the totals cannot hold is refused with -EOVERFLOW. */
int pg_insert_ledger(struct pg_store *s, struct pg_conn *c, const char *org_id, const char *run_id,
                     const char *kind, int64_t micros, int64_t now)
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
    struct params p = {0};
    p_i64(&p, dbal);
    p_i64(&p, dres);
    p_text(&p, org_id);
    unsigned long n = 0;
    /* CASE, not OR: PostgreSQL does not promise to short-circuit, and the subtraction must not
     * be evaluated for a negative delta. */
    int rc = pg_exec(s, c,
                     "UPDATE orgs SET balance_micros = balance_micros + $1::bigint, "
                     "reserved_micros = reserved_micros + $2::bigint WHERE id = $3 AND "
                     "CASE WHEN $1::bigint <= 0 THEN true "
                     "ELSE balance_micros <= 9223372036854775807 - $1::bigint END",
                     &p, NULL, &n, "balance update");
    if (rc)
        return rc;
    if (n == 0) {
        struct params q = {0};
        p_text(&q, org_id);
        PGresult *r = NULL;
        if ((rc = pg_exec(s, c, "SELECT 1 FROM orgs WHERE id = $1", &q, &r, NULL, "org check")))
            return rc;
        int have = PQntuples(r);
        PQclear(r);
        return have ? -EOVERFLOW : -ENOENT;
    }
    struct params q = {0};
    p_text(&q, org_id);
    p_text(&q, run_id);
    p_text(&q, kind);
    p_i64(&q, micros);
    p_i64(&q, now);
    return pg_exec(s, c,
                   "INSERT INTO ledger (org_id, run_id, kind, micros, created_at) "
                   "VALUES ($1, $2, $3, $4, $5)",
                   &q, NULL, NULL, "ledger insert");
}

/* The running totals of a run's entry (no credit: no overflow to check), and the entry. */
static const char org_move_sql[] =
    "WITH u AS (UPDATE orgs SET balance_micros = balance_micros + $1::bigint, reserved_micros = "
    "reserved_micros + $2::bigint WHERE id = $3 RETURNING 1) SELECT 1 / COUNT(*) FROM u";
static const char ledger_insert_sql[] =
    "INSERT INTO ledger (org_id, run_id, kind, micros, created_at) VALUES ($1, $2, $3, $4, $5)";

int pg_batch_ledger(struct pg_batch *b, const char *org_id, const char *run_id, const char *kind,
                    int64_t micros, int64_t now)
{
    int64_t dres = -micros, dbal = 0;
    if (strcmp(kind, "reserve") == 0)
        dres = micros;
    else if (strcmp(kind, "charge") == 0)
        dbal = -micros;
    else if (strcmp(kind, "release") != 0)
        return -EINVAL;
    struct params *p = pg_batch_add(b, org_move_sql, "balance update", -ENOENT);
    if (!p)
        return -E2BIG;
    p_i64(p, dbal);
    p_i64(p, dres);
    p_text(p, org_id);
    if (!(p = pg_batch_add(b, ledger_insert_sql, "ledger insert", 0)))
        return -E2BIG;
    p_text(p, org_id);
    p_text(p, run_id);
    p_text(p, kind);
    p_i64(p, micros);
    p_i64(p, now);
    return 0;
}

static int org_find_once(struct pg_store *s, struct pg_conn *c, const char *name, char *org_id,
                         size_t idlen)
{
    struct params p = {0};
    p_text(&p, name);
    PGresult *r = NULL;
    int rc = pg_exec(s, c, "SELECT id FROM orgs WHERE name = $1", &p, &r, NULL, "org find");
    if (rc)
        return rc;
    if (PQntuples(r))
        pg_col_copy(r, 0, 0, org_id, idlen);
    else
        rc = -ENOENT;
    PQclear(r);
    return rc;
}

int pg_org_find(struct eph_store *base, const char *name, char *org_id, size_t idlen)
{
    struct pg_store *s = P(base);
    return WITH_CONN(s, org_find_once(s, c, name, org_id, idlen));
}

static int org_ensure_once(struct pg_store *s, struct pg_conn *c, const char *name,
                           int64_t initial_credit, char *org_id, size_t idlen, bool *created)
{
    *created = false;
    int rc = org_find_once(s, c, name, org_id, idlen);
    if (rc != -ENOENT)
        return rc;
    char id[48];
    if ((rc = eph_id_hex("org_", 12, id, sizeof(id))))
        return rc;
    int64_t now = eph_clock_real_ms();
    if ((rc = pg_begin(s, c)))
        return rc;
    struct params p = {0};
    p_text(&p, id);
    p_text(&p, name);
    p_i64(&p, now);
    unsigned long n = 0;
    /* Two nodes ensuring the same org: one inserts, the other finds it. */
    if ((rc = pg_exec(s, c,
                      "INSERT INTO orgs (id, name, created_at) VALUES ($1, $2, $3) "
                      "ON CONFLICT (name) DO NOTHING",
                      &p, NULL, &n, "org insert")))
        return rc;
    if (n == 0) {
        pg_rollback(c);
        return org_find_once(s, c, name, org_id, idlen);
    }
    if (initial_credit > 0 &&
        (rc = pg_insert_ledger(s, c, id, NULL, "credit", initial_credit, now)))
        return rc;
    if ((rc = pg_commit(s, c)))
        return rc;
    snprintf(org_id, idlen, "%s", id);
    *created = true;
    return 0;
}

int pg_org_ensure(struct eph_store *base, const char *name, int64_t initial_credit, char *org_id,
                  size_t idlen, bool *created)
{
    struct pg_store *s = P(base);
    return WITH_CONN(s, org_ensure_once(s, c, name, initial_credit, org_id, idlen, created));
}

static int credit_once(struct pg_store *s, struct pg_conn *c, const char *org_id, int64_t micros)
{
    int rc = pg_begin(s, c);
    if (!rc)
        rc = pg_insert_ledger(s, c, org_id, NULL, "credit", micros, eph_clock_real_ms());
    if (!rc)
        rc = pg_commit(s, c);
    return rc;
}

int pg_credit_add(struct eph_store *base, const char *org_id, int64_t micros)
{
    struct pg_store *s = P(base);
    if (micros <= 0)
        return -EINVAL;
    /* Not retried after a lost connection: a credit whose commit was lost with the connection
     * must not be applied twice (the API's idempotency keys cover a client's retry). */
    struct pg_conn *c = pg_pool_get(s);
    if (!c)
        return -ENOTCONN;
    int rc = credit_once(s, c, org_id, micros);
    if (rc)
        pg_rollback(c);
    pg_pool_put(s, c);
    return rc;
}

int pg_balance_once(struct pg_store *s, struct pg_conn *c, const char *org_id,
                    struct eph_balance *out, bool lock)
{
    struct params p = {0};
    p_text(&p, org_id);
    PGresult *r = NULL;
    int rc =
        pg_exec(s, c,
                lock ? "SELECT balance_micros, reserved_micros FROM orgs WHERE id = $1 FOR UPDATE"
                     : "SELECT balance_micros, reserved_micros FROM orgs WHERE id = $1",
                &p, &r, NULL, "balance");
    if (rc)
        return rc;
    if (PQntuples(r)) {
        out->balance_micros = pg_col_i64(r, 0, 0);
        out->reserved_micros = pg_col_i64(r, 0, 1);
        out->available_micros = out->balance_micros - out->reserved_micros;
    } else {
        rc = -ENOENT;
    }
    PQclear(r);
    return rc;
}

int pg_balance(struct eph_store *base, const char *org_id, struct eph_balance *out)
{
    struct pg_store *s = P(base);
    return WITH_CONN(s, pg_balance_once(s, c, org_id, out, false));
}

static int totals_once(struct pg_store *s, struct pg_conn *c, const char *org_id, int64_t *v)
{
    struct params p = {0};
    p_text(&p, org_id);
    PGresult *r = NULL;
    int rc = pg_exec(s, c,
                     "SELECT COALESCE(SUM(micros) FILTER (WHERE kind = 'credit'), 0),"
                     " COALESCE(SUM(micros) FILTER (WHERE kind = 'reserve'), 0),"
                     " COALESCE(SUM(micros) FILTER (WHERE kind = 'charge'), 0),"
                     " COALESCE(SUM(micros) FILTER (WHERE kind = 'release'), 0) "
                     "FROM ledger WHERE org_id = $1",
                     &p, &r, NULL, "ledger totals");
    if (rc)
        return rc;
    for (int i = 0; i < 4; i++)
        v[i] = pg_col_i64(r, 0, i);
    PQclear(r);
    return 0;
}

int pg_ledger_totals(struct eph_store *base, const char *org_id, int64_t *credits,
                     int64_t *reserves, int64_t *charges, int64_t *releases)
{
    struct pg_store *s = P(base);
    int64_t v[4] = {0};
    int rc = WITH_CONN(s, totals_once(s, c, org_id, v));
    *credits = v[0];
    *reserves = v[1];
    *charges = v[2];
    *releases = v[3];
    return rc;
}

/* ---- keys ---- */

static int key_insert_once(struct pg_store *s, struct pg_conn *c, const char *id,
                           const char *org_id, const char *key_hash, const char *role,
                           const char *prefix)
{
    struct params p = {0};
    p_text(&p, id);
    p_text(&p, org_id);
    p_text(&p, key_hash);
    p_text(&p, role);
    p_i64(&p, eph_clock_real_ms());
    p_text(&p, prefix);
    return pg_exec(s, c,
                   "INSERT INTO api_keys (id, org_id, key_hash, role, created_at, prefix) "
                   "VALUES ($1, $2, $3, $4, $5, $6)",
                   &p, NULL, NULL, "key insert");
}

int pg_key_insert(struct eph_store *base, const char *org_id, const char *key_hash,
                  const char *role, const char *prefix, char *key_id, size_t idlen)
{
    struct pg_store *s = P(base);
    char id[48];
    int rc = eph_id_hex("key_", 12, id, sizeof(id));
    if (rc)
        return rc;
    rc = WITH_CONN(s, key_insert_once(s, c, id, org_id, key_hash, role, prefix));
    if (!rc && key_id)
        snprintf(key_id, idlen, "%s", id);
    return rc;
}

static int key_lookup_once(struct pg_store *s, struct pg_conn *c, const char *key_hash,
                           char *org_id, size_t idlen, char *role, size_t rolelen)
{
    struct params p = {0};
    p_text(&p, key_hash);
    PGresult *r = NULL;
    int rc = pg_exec(s, c,
                     "SELECT org_id, role FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL",
                     &p, &r, NULL, "key lookup");
    if (rc)
        return rc;
    if (PQntuples(r)) {
        pg_col_copy(r, 0, 0, org_id, idlen);
        pg_col_copy(r, 0, 1, role, rolelen);
    } else {
        rc = -ENOENT;
    }
    PQclear(r);
    return rc;
}

int pg_key_lookup(struct eph_store *base, const char *key_hash, char *org_id, size_t idlen,
                  char *role, size_t rolelen)
{
    struct pg_store *s = P(base);
    return WITH_CONN(s, key_lookup_once(s, c, key_hash, org_id, idlen, role, rolelen));
}

int pg_key_list(struct eph_store *base, const char *org_id, eph_key_cb cb, void *ctx)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, org_id);
    PGresult *r = NULL;
    int rc = WITH_CONN(s, pg_select_once(s, c,
                                         "SELECT id, role, COALESCE(prefix, ''), created_at FROM "
                                         "api_keys WHERE org_id = $1 AND revoked_at IS NULL "
                                         "ORDER BY created_at, id",
                                         &p, &r, "key list"));
    for (int i = 0; !rc && i < PQntuples(r); i++) {
        struct eph_key_info k;
        memset(&k, 0, sizeof(k));
        pg_col_copy(r, i, 0, k.id, sizeof(k.id));
        pg_col_copy(r, i, 1, k.role, sizeof(k.role));
        pg_col_copy(r, i, 2, k.prefix, sizeof(k.prefix));
        k.created_at_ms = pg_col_i64(r, i, 3);
        rc = cb(&k, ctx);
    }
    PQclear(r);
    return rc;
}

int pg_key_revoke(struct eph_store *base, const char *org_id, const char *key_id, int64_t now_ms)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_i64(&p, now_ms);
    p_text(&p, key_id);
    p_text(&p, org_id);
    unsigned long n = 0;
    int rc = WITH_CONN(s, pg_changed_once(s, c,
                                          "UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND "
                                          "org_id = $3 AND revoked_at IS NULL",
                                          &p, &n, "key revoke"));
    return rc ? rc : n ? 0 : -ENOENT;
}

/* ---- connections ---- */

int pg_conn_insert(struct eph_store *base, const char *org_id, const struct eph_connection *cn,
                   char *conn_id, size_t idlen)
{
    struct pg_store *s = P(base);
    char id[48];
    int rc = eph_id_hex("conn_", 12, id, sizeof(id));
    if (rc)
        return rc;
    struct params p = {0};
    p_text(&p, id);
    p_text(&p, org_id);
    p_text(&p, cn->name);
    p_text(&p, cn->base_url);
    p_json(&p, cn->methods, "[]");
    p_json(&p, cn->path_prefixes, "[]");
    p_json(&p, cn->header_names, "[]");
    p_blob(&p, cn->sealed, cn->sealed_len);
    p_i64(&p, cn->created_at_ms);
    p_json(&p, cn->query_names, "[]");
    unsigned long n = 0;
    rc = WITH_CONN(s,
                   pg_changed_once(s, c,
                                   "INSERT INTO connections (id, org_id, name, base_url, methods, "
                                   "path_prefixes, header_names, sealed_headers, created_at, "
                                   "query_names) "
                                   "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                                   &p, &n, "connection insert"));
    p_free(&p);
    if (!rc && conn_id)
        snprintf(conn_id, idlen, "%s", id);
    return rc;
}

#define CONN_COLUMNS                                                                               \
    "id, name, base_url, methods, path_prefixes, header_names, sealed_headers, created_at, "       \
    "query_names"

static int row_to_conn(const PGresult *r, int i, struct eph_connection *cn)
{
    memset(cn, 0, sizeof(*cn));
    pg_col_copy(r, i, 0, cn->id, sizeof(cn->id));
    pg_col_copy(r, i, 1, cn->name, sizeof(cn->name));
    cn->base_url = pg_col_strdup(r, i, 2);
    cn->methods = pg_col_json(r, i, 3);
    cn->path_prefixes = pg_col_json(r, i, 4);
    cn->header_names = pg_col_json(r, i, 5);
    size_t len = 0;
    unsigned char *b = PQunescapeBytea((const unsigned char *)pg_val(r, i, 6), &len);
    if (b && len) {
        cn->sealed = malloc(len);
        if (cn->sealed) {
            memcpy(cn->sealed, b, len);
            cn->sealed_len = len;
        }
    }
    if (b) {
        memset(b, 0, len);
        PQfreemem(b);
    }
    cn->created_at_ms = pg_col_i64(r, i, 7);
    cn->query_names = pg_col_json(r, i, 8);
    if (!cn->base_url || !cn->methods || !cn->path_prefixes || !cn->header_names ||
        !cn->query_names || (len && !cn->sealed)) {
        eph_connection_release(cn);
        return -ENOMEM;
    }
    return 0;
}

int pg_conn_list(struct eph_store *base, const char *org_id, eph_conn_cb cb, void *ctx)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, org_id);
    PGresult *r = NULL;
    int rc = WITH_CONN(s, pg_select_once(s, c,
                                         "SELECT " CONN_COLUMNS
                                         " FROM connections WHERE org_id = $1 ORDER BY name",
                                         &p, &r, "connection list"));
    for (int i = 0; !rc && i < PQntuples(r); i++) {
        struct eph_connection cn;
        if ((rc = row_to_conn(r, i, &cn)))
            break;
        rc = cb(&cn, ctx);
        eph_connection_release(&cn);
    }
    PQclear(r);
    return rc;
}

int pg_conn_get(struct eph_store *base, const char *org_id, const char *name,
                struct eph_connection *out)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, org_id);
    p_text(&p, name);
    PGresult *r = NULL;
    int rc = WITH_CONN(s, pg_select_once(s, c,
                                         "SELECT " CONN_COLUMNS
                                         " FROM connections WHERE org_id = $1 AND name = $2",
                                         &p, &r, "connection get"));
    if (!rc)
        rc = PQntuples(r) ? row_to_conn(r, 0, out) : -ENOENT;
    PQclear(r);
    return rc;
}

int pg_conn_delete(struct eph_store *base, const char *org_id, const char *name_or_id)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, org_id);
    p_text(&p, name_or_id);
    unsigned long n = 0;
    int rc = WITH_CONN(s, pg_changed_once(s, c,
                                          "DELETE FROM connections WHERE org_id = $1 AND "
                                          "(name = $2 OR id = $2)",
                                          &p, &n, "connection delete"));
    return rc ? rc : n ? 0 : -ENOENT;
}
