/*
 * postgres.c - the shared store: PostgreSQL through libpq, for several nodes on one database.
 *
 * A small pool of connections (db_pool_size), each used by one thread at a time. Every statement
 * is prepared once per connection (keyed by its SQL text's address: every statement is a literal)
 * and executed with text parameters. Money moves under a row lock on the org (SELECT ... FOR
 * UPDATE), so concurrent creates on several nodes serialise on the org and can never overdraw;
 * the running totals are updated in the same transaction as each ledger entry.
 *
 * A lost connection is reset and the operation retried (bounded, with back-off) before -ENOTCONN
 * reaches the caller. Only whole operations are retried, and every write is safe to repeat: a
 * settlement or a claim answers -EALREADY the second time, and an event whose commit was lost
 * with the connection is found by its (run_id, seq) key and counts as written.
 *
 * Migrations run at open inside one transaction holding an advisory lock, so two nodes starting
 * together migrate once.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

#include "common/clock.h"
#include "common/id.h"
#include "common/log.h"
#include "store/migrations.h"
#include "store/store.h"

#define STMT_CACHE 64
#define MAX_PARAMS 24
/* Retries of an operation whose connection failed: about 30 s in all, then -ENOTCONN. */
#define CONN_RETRIES 60
/* "eph" as the advisory lock of migrations. */
#define MIGRATION_LOCK 0x657068

struct pg_conn {
    PGconn *c;
    bool busy;
    const char *prepared[STMT_CACHE];
    unsigned nprepared;
};

struct pg_store {
    struct eph_store base;
    char *conninfo;
    /* The listening thread: its own connection, outside the pool. */
    pthread_t listener;
    bool listening;
    atomic_bool stop_listening;
    struct eph_store_listener lis;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct pg_conn *pool;
    unsigned n;
    unsigned urgent_waiting;   /* under lock: lease keeper calls waiting for a connection */
    unsigned ordinary_waiting; /* under lock: other calls waiting for one */
    unsigned long round_trips; /* under lock: statements sent (bench) */
    /* An outage is logged once, not once per operation and retry: set when it is said, cleared
     * when a connection is made again. */
    atomic_bool outage_said;
};

#define P(b) ((struct pg_store *)(b))

/* ---- parameters ---- */

struct params {
    const char *v[MAX_PARAMS];
    int len[MAX_PARAMS];
    int fmt[MAX_PARAMS];
    char num[MAX_PARAMS][24];
    char *owned[MAX_PARAMS];
    int n;
};

static void p_text(struct params *p, const char *s)
{
    p->v[p->n++] = s;
}

static void p_i64(struct params *p, int64_t v)
{
    snprintf(p->num[p->n], sizeof(p->num[p->n]), "%lld", (long long)v);
    p->v[p->n] = p->num[p->n];
    p->n++;
}

/* 0 is "not yet": NULL. */
static void p_ms(struct params *p, int64_t ms)
{
    if (ms)
        p_i64(p, ms);
    else
        p_text(p, NULL);
}

static void p_json(struct params *p, const json_t *j, const char *dflt)
{
    char *t = j ? json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    p->owned[p->n] = t;
    p->v[p->n++] = t ? t : dflt;
}

static void p_blob(struct params *p, const unsigned char *b, size_t len)
{
    p->v[p->n] = (const char *)b;
    p->len[p->n] = (int)len;
    p->fmt[p->n] = 1;
    p->n++;
}

static void p_free(struct params *p)
{
    for (int i = 0; i < p->n; i++)
        free(p->owned[i]);
}

/* ---- connections ---- */

static bool conn_ok(struct pg_conn *c)
{
    return c->c && PQstatus(c->c) == CONNECTION_OK;
}

static int conn_connect(struct pg_store *s, struct pg_conn *c)
{
    if (c->c)
        PQfinish(c->c);
    c->nprepared = 0;
    c->c = PQconnectdb(s->conninfo);
    if (PQstatus(c->c) != CONNECTION_OK) {
        /* The message may carry the host, never the password (libpq does not echo it). */
        if (!atomic_exchange(&s->outage_said, true))
            EPH_WARN("store",
                     "cannot connect to PostgreSQL (retrying; said once until it "
                     "answers again): %s",
                     PQerrorMessage(c->c));
        return -ENOTCONN;
    }
    if (atomic_exchange(&s->outage_said, false))
        EPH_INFO("store", "connected to PostgreSQL again");
    PQsetNoticeProcessor(c->c, NULL, NULL);
    PGresult *r = PQexec(c->c, "SET TIME ZONE 'UTC'");
    PQclear(r);
    return 0;
}

/* Takes a free connection, waiting for one. An urgent caller (the lease keeper: a renewal that
 * queues behind the workers' writes can cost this node its leases) goes before every waiting
 * ordinary caller. */
static struct pg_conn *conn_get_as(struct pg_store *s, bool urgent)
{
    pthread_mutex_lock(&s->lock);
    struct pg_conn *c = NULL;
    bool waited = false;
    if (urgent)
        s->urgent_waiting++;
    for (;;) {
        if (urgent || !s->urgent_waiting)
            for (unsigned i = 0; i < s->n; i++)
                if (!s->pool[i].busy) {
                    c = &s->pool[i];
                    break;
                }
        if (c)
            break;
        if (!urgent && !waited) {
            waited = true;
            s->ordinary_waiting++;
        }
        pthread_cond_wait(&s->cond, &s->lock);
    }
    if (waited)
        s->ordinary_waiting--;
    /* The ordinary waiters a release passed over look again (another may be free). */
    if (urgent && --s->urgent_waiting == 0)
        pthread_cond_broadcast(&s->cond);
    c->busy = true;
    pthread_mutex_unlock(&s->lock);
    if (!conn_ok(c) && conn_connect(s, c)) {
        pthread_mutex_lock(&s->lock);
        c->busy = false;
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
        return NULL;
    }
    return c;
}

static struct pg_conn *conn_get(struct pg_store *s)
{
    return conn_get_as(s, false);
}

static void conn_put(struct pg_store *s, struct pg_conn *c)
{
    /* A connection left inside a transaction (an error path that could not roll back) is
     * unusable: drop it, the next user reconnects. */
    if (c->c && PQtransactionStatus(c->c) != PQTRANS_IDLE) {
        PQfinish(c->c);
        c->c = NULL;
    }
    pthread_mutex_lock(&s->lock);
    c->busy = false;
    /* With an urgent caller waiting, the one woken must be that one. */
    if (s->urgent_waiting)
        pthread_cond_broadcast(&s->cond);
    else
        pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

/* Maps a failed result to a negative errno, logging the database's message. */
static int pg_err(struct pg_conn *c, PGresult *r, const char *what)
{
    if (!conn_ok(c))
        return -ENOTCONN;
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    if (state && strncmp(state, "23", 2) == 0)
        return -EEXIST; /* integrity: unique or foreign key */
    if (state && (strcmp(state, "40001") == 0 || strcmp(state, "40P01") == 0 ||
                  strcmp(state, "55P03") == 0)) {
        EPH_WARN("store", "%s: database busy (%s)", what, state);
        return -EBUSY;
    }
    if (state && strcmp(state, "53100") == 0) {
        EPH_ERROR("store", "%s: database disk is full", what);
        return -ENOSPC;
    }
    if (state && strcmp(state, "25006") == 0) {
        EPH_ERROR("store", "%s: database is read-only", what);
        return -EROFS;
    }
    if (state && ((strncmp(state, "08", 2) == 0 && strcmp(state, "08P01") != 0) ||
                  strncmp(state, "57P", 3) == 0))
        return -ENOTCONN; /* connection exception, admin shutdown (not a protocol error) */
    EPH_ERROR("store", "%s: %s", what, r ? PQresultErrorMessage(r) : PQerrorMessage(c->c));
    return -EIO;
}

/* Runs a prepared statement (preparing it on first use on this connection). *out gets the result
 * of a statement that returns rows (the caller clears it); NULL out: none expected. *changed gets
 * the number of rows affected when not NULL. */
static int run(struct pg_store *s, struct pg_conn *c, const char *sql, struct params *p,
               PGresult **out, unsigned long *changed, const char *what)
{
    char name[16];
    unsigned i;
    for (i = 0; i < c->nprepared; i++)
        if (c->prepared[i] == sql)
            break;
    bool cached = i < c->nprepared;
    if (!cached && c->nprepared < STMT_CACHE) {
        snprintf(name, sizeof(name), "s%u", c->nprepared);
        PGresult *r = PQprepare(c->c, name, sql, 0, NULL);
        int rc = PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : pg_err(c, r, what);
        PQclear(r);
        if (rc)
            return rc;
        c->prepared[c->nprepared++] = sql;
        cached = true;
    } else {
        snprintf(name, sizeof(name), "s%u", i);
    }
    int n = p ? p->n : 0;
    PGresult *r = cached ? PQexecPrepared(c->c, name, n, p ? p->v : NULL, p ? p->len : NULL,
                                          p ? p->fmt : NULL, 0)
                         : PQexecParams(c->c, sql, n, NULL, p ? p->v : NULL, p ? p->len : NULL,
                                        p ? p->fmt : NULL, 0);
    pthread_mutex_lock(&s->lock);
    s->round_trips++;
    pthread_mutex_unlock(&s->lock);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        int rc = pg_err(c, r, what);
        PQclear(r);
        return rc;
    }
    if (changed) {
        const char *t = PQcmdTuples(r);
        *changed = t && *t ? strtoul(t, NULL, 10) : 0;
    }
    if (out)
        *out = r;
    else
        PQclear(r);
    return 0;
}

static int exec_simple(struct pg_store *s, struct pg_conn *c, const char *sql, const char *what)
{
    return run(s, c, sql, NULL, NULL, NULL, what);
}

static int begin(struct pg_store *s, struct pg_conn *c)
{
    return exec_simple(s, c, "BEGIN", "begin");
}

static int commit(struct pg_store *s, struct pg_conn *c)
{
    return exec_simple(s, c, "COMMIT", "commit");
}

static void rollback(struct pg_conn *c)
{
    if (conn_ok(c) && PQtransactionStatus(c->c) != PQTRANS_IDLE)
        PQclear(PQexec(c->c, "ROLLBACK"));
}

/* Back-off between retries of an operation whose connection failed: false when out of tries. */
static bool retry_wait(struct pg_store *s, unsigned attempt)
{
    if (attempt > CONN_RETRIES)
        return false;
    if (attempt == 1 && !atomic_exchange(&s->outage_said, true))
        EPH_WARN("store", "PostgreSQL connection lost; retrying (said once until it answers "
                          "again)");
    struct timespec ts = {0, (attempt < 4 ? 100 : 500) * 1000000L};
    nanosleep(&ts, NULL);
    return true;
}

/* Runs one operation on a pooled connection, retrying the whole operation while the connection
 * fails. expr sees `c`. WITH_CONN_URGENT goes before ordinary waiters (conn_get_as). */
#define WITH_CONN(s, expr) WITH_CONN_AS(s, false, expr)
#define WITH_CONN_URGENT(s, expr) WITH_CONN_AS(s, true, expr)
#define WITH_CONN_AS(s, urgent, expr)                                                              \
    ({                                                                                             \
        int _rc;                                                                                   \
        unsigned _try = 0;                                                                         \
        do {                                                                                       \
            struct pg_conn *c = conn_get_as(s, urgent);                                            \
            if (!c) {                                                                              \
                _rc = -ENOTCONN;                                                                   \
            } else {                                                                               \
                _rc = (expr);                                                                      \
                if (_rc)                                                                           \
                    rollback(c);                                                                   \
                conn_put(s, c);                                                                    \
            }                                                                                      \
        } while (_rc == -ENOTCONN && retry_wait(s, ++_try));                                       \
        _rc;                                                                                       \
    })

/* ---- columns ---- */

static bool isnull(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col);
}

static const char *val(const PGresult *r, int row, int col)
{
    return PQgetvalue(r, row, col);
}

static int64_t col_i64(const PGresult *r, int row, int col)
{
    return isnull(r, row, col) ? 0 : strtoll(val(r, row, col), NULL, 10);
}

static char *col_strdup(const PGresult *r, int row, int col)
{
    return isnull(r, row, col) ? NULL : strdup(val(r, row, col));
}

static json_t *col_json(const PGresult *r, int row, int col)
{
    return isnull(r, row, col) ? NULL : json_loads(val(r, row, col), JSON_DECODE_ANY, NULL);
}

static void col_copy(const PGresult *r, int row, int col, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s", isnull(r, row, col) ? "" : val(r, row, col));
}

/* ---- open / close ---- */

static int apply_migrations(struct pg_store *s, struct pg_conn *c)
{
    int rc = begin(s, c);
    if (rc)
        return rc;
    char lock[96];
    snprintf(lock, sizeof(lock), "SELECT pg_advisory_xact_lock(%d)", MIGRATION_LOCK);
    PGresult *r = PQexec(c->c, lock);
    rc = PQresultStatus(r) == PGRES_TUPLES_OK ? 0 : pg_err(c, r, "migration lock");
    PQclear(r);
    if (!rc) {
        r = PQexec(c->c, "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY "
                         "KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)");
        rc = PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : pg_err(c, r, "schema_migrations");
        PQclear(r);
    }
    for (unsigned i = 0; !rc && i < eph_postgres_migrations_count; i++) {
        const struct eph_migration *m = &eph_postgres_migrations[i];
        struct params p = {0};
        p_i64(&p, m->version);
        PGresult *have = NULL;
        if ((rc = run(s, c, "SELECT 1 FROM schema_migrations WHERE version = $1::integer", &p,
                      &have, NULL, "migration check")))
            break;
        int n = PQntuples(have);
        PQclear(have);
        if (n)
            continue;
        r = PQexec(c->c, m->sql);
        rc = PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : pg_err(c, r, m->name);
        PQclear(r);
        if (rc)
            break;
        struct params q = {0};
        p_i64(&q, m->version);
        p_text(&q, m->name);
        p_i64(&q, eph_clock_real_ms());
        if ((rc = run(s, c, "INSERT INTO schema_migrations VALUES ($1, $2, $3)", &q, NULL, NULL,
                      "record migration")))
            break;
        EPH_INFO("store", "applied migration %d (%s)", m->version, m->name);
    }
    if (!rc)
        rc = commit(s, c);
    if (rc)
        rollback(c);
    return rc;
}

static void pg_close(struct eph_store *base)
{
    struct pg_store *s = P(base);
    if (!s)
        return;
    if (s->listening) {
        atomic_store(&s->stop_listening, true);
        pthread_join(s->listener, NULL);
        s->listening = false;
    }
    for (unsigned i = 0; i < s->n; i++)
        if (s->pool[i].c)
            PQfinish(s->pool[i].c);
    free(s->pool);
    free(s->conninfo);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    free(s);
}

/* The pool size rides on the target as a query parameter of our own (pool_size=N), removed before
 * the rest reaches libpq. */
static unsigned take_pool_size(char *conninfo)
{
    unsigned n = 4;
    char *q = strchr(conninfo, '?');
    if (!q)
        return n;
    char *k = strstr(q, "pool_size=");
    if (!k || (k[-1] != '?' && k[-1] != '&'))
        return n;
    char *end = NULL;
    unsigned long v = strtoul(k + 10, &end, 10);
    if (v >= 1 && v <= 256)
        n = (unsigned)v;
    /* Cut "pool_size=N" and its separator out. */
    char *rest = end && *end == '&' ? end + 1 : end;
    if (k[-1] == '?' && (!rest || !*rest))
        k[-1] = '\0';
    else
        memmove(k, rest, strlen(rest) + 1);
    size_t len = strlen(conninfo);
    if (len && (conninfo[len - 1] == '&' || conninfo[len - 1] == '?'))
        conninfo[len - 1] = '\0';
    return n;
}

static int pg_open(const char *target, struct eph_store **out, char *err, size_t errlen)
{
    struct pg_store *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->base.ops = &eph_store_postgres_ops;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    s->conninfo = strdup(target);
    if (!s->conninfo) {
        pg_close(&s->base);
        return -ENOMEM;
    }
    s->n = take_pool_size(s->conninfo);
    s->pool = calloc(s->n, sizeof(*s->pool));
    if (!s->pool) {
        pg_close(&s->base);
        return -ENOMEM;
    }
    struct pg_conn *c = &s->pool[0];
    c->c = PQconnectdb(s->conninfo);
    if (PQstatus(c->c) != CONNECTION_OK) {
        snprintf(err, errlen, "cannot connect to PostgreSQL: %s", PQerrorMessage(c->c));
        /* libpq's messages end with a newline. */
        size_t l = strlen(err);
        while (l && (err[l - 1] == '\n' || err[l - 1] == ' '))
            err[--l] = '\0';
        pg_close(&s->base);
        return -ENOTCONN;
    }
    PQsetNoticeProcessor(c->c, NULL, NULL);
    int rc = apply_migrations(s, c);
    if (rc) {
        snprintf(err, errlen, "cannot prepare the PostgreSQL database: %s",
                 PQerrorMessage(c->c)[0] ? PQerrorMessage(c->c) : "migration failed");
        pg_close(&s->base);
        return rc;
    }
    *out = &s->base;
    return 0;
}

static int ping_once(struct pg_store *s, struct pg_conn *c)
{
    return exec_simple(s, c, "SELECT 1", "ping");
}

static int pg_ping(struct eph_store *base)
{
    /* No retry loop: health checks want the answer now. */
    struct pg_store *s = P(base);
    struct pg_conn *c = conn_get(s);
    if (!c)
        return -ENOTCONN;
    int rc = ping_once(s, c);
    conn_put(s, c);
    return rc;
}

/* A server that refuses writes (a standby, default_transaction_read_only) reads fine: ask it.
 * A full disk on the server is not seen here; the writes that fail say it (docs/STORE.md). */
static int pg_writable(struct eph_store *base, char *why, size_t whylen)
{
    struct pg_store *s = P(base);
    struct pg_conn *c = conn_get(s);
    if (!c)
        return -ENOTCONN;
    PGresult *r = NULL;
    struct params none = {0};
    int rc =
        run(s, c, "SELECT pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on'",
            &none, &r, NULL, "write check");
    if (!rc && PQntuples(r) == 1 && strcmp(val(r, 0, 0), "t") == 0) {
        snprintf(why, whylen,
                 "the database server is read-only (a standby, or "
                 "default_transaction_read_only)");
        rc = -EROFS;
    }
    PQclear(r);
    conn_put(s, c);
    return rc;
}

/* ---- orgs, ledger, balance ---- */

/* Appends a ledger entry and moves the org's running totals, inside the caller's transaction. A
 * credit the totals cannot hold is refused with -EOVERFLOW. */
static int insert_ledger(struct pg_store *s, struct pg_conn *c, const char *org_id,
                         const char *run_id, const char *kind, int64_t micros, int64_t now)
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
    int rc = run(s, c,
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
        if ((rc = run(s, c, "SELECT 1 FROM orgs WHERE id = $1", &q, &r, NULL, "org check")))
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
    return run(s, c,
               "INSERT INTO ledger (org_id, run_id, kind, micros, created_at) "
               "VALUES ($1, $2, $3, $4, $5)",
               &q, NULL, NULL, "ledger insert");
}

static int org_find_once(struct pg_store *s, struct pg_conn *c, const char *name, char *org_id,
                         size_t idlen)
{
    struct params p = {0};
    p_text(&p, name);
    PGresult *r = NULL;
    int rc = run(s, c, "SELECT id FROM orgs WHERE name = $1", &p, &r, NULL, "org find");
    if (rc)
        return rc;
    if (PQntuples(r))
        col_copy(r, 0, 0, org_id, idlen);
    else
        rc = -ENOENT;
    PQclear(r);
    return rc;
}

static int pg_org_find(struct eph_store *base, const char *name, char *org_id, size_t idlen)
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
    if ((rc = begin(s, c)))
        return rc;
    struct params p = {0};
    p_text(&p, id);
    p_text(&p, name);
    p_i64(&p, now);
    unsigned long n = 0;
    /* Two nodes ensuring the same org: one inserts, the other finds it. */
    if ((rc = run(s, c,
                  "INSERT INTO orgs (id, name, created_at) VALUES ($1, $2, $3) "
                  "ON CONFLICT (name) DO NOTHING",
                  &p, NULL, &n, "org insert")))
        return rc;
    if (n == 0) {
        rollback(c);
        return org_find_once(s, c, name, org_id, idlen);
    }
    if (initial_credit > 0 && (rc = insert_ledger(s, c, id, NULL, "credit", initial_credit, now)))
        return rc;
    if ((rc = commit(s, c)))
        return rc;
    snprintf(org_id, idlen, "%s", id);
    *created = true;
    return 0;
}

static int pg_org_ensure(struct eph_store *base, const char *name, int64_t initial_credit,
                         char *org_id, size_t idlen, bool *created)
{
    struct pg_store *s = P(base);
    return WITH_CONN(s, org_ensure_once(s, c, name, initial_credit, org_id, idlen, created));
}

static int credit_once(struct pg_store *s, struct pg_conn *c, const char *org_id, int64_t micros)
{
    int rc = begin(s, c);
    if (!rc)
        rc = insert_ledger(s, c, org_id, NULL, "credit", micros, eph_clock_real_ms());
    if (!rc)
        rc = commit(s, c);
    return rc;
}

static int pg_credit_add(struct eph_store *base, const char *org_id, int64_t micros)
{
    struct pg_store *s = P(base);
    if (micros <= 0)
        return -EINVAL;
    /* Not retried after a lost connection: a credit whose commit was lost with the connection
     * must not be applied twice (the API's idempotency keys cover a client's retry). */
    struct pg_conn *c = conn_get(s);
    if (!c)
        return -ENOTCONN;
    int rc = credit_once(s, c, org_id, micros);
    if (rc)
        rollback(c);
    conn_put(s, c);
    return rc;
}

static int balance_once(struct pg_store *s, struct pg_conn *c, const char *org_id,
                        struct eph_balance *out, bool lock)
{
    struct params p = {0};
    p_text(&p, org_id);
    PGresult *r = NULL;
    int rc = run(s, c,
                 lock ? "SELECT balance_micros, reserved_micros FROM orgs WHERE id = $1 FOR UPDATE"
                      : "SELECT balance_micros, reserved_micros FROM orgs WHERE id = $1",
                 &p, &r, NULL, "balance");
    if (rc)
        return rc;
    if (PQntuples(r)) {
        out->balance_micros = col_i64(r, 0, 0);
        out->reserved_micros = col_i64(r, 0, 1);
        out->available_micros = out->balance_micros - out->reserved_micros;
    } else {
        rc = -ENOENT;
    }
    PQclear(r);
    return rc;
}

static int pg_balance(struct eph_store *base, const char *org_id, struct eph_balance *out)
{
    struct pg_store *s = P(base);
    return WITH_CONN(s, balance_once(s, c, org_id, out, false));
}

static int totals_once(struct pg_store *s, struct pg_conn *c, const char *org_id, int64_t *v)
{
    struct params p = {0};
    p_text(&p, org_id);
    PGresult *r = NULL;
    int rc = run(s, c,
                 "SELECT COALESCE(SUM(micros) FILTER (WHERE kind = 'credit'), 0),"
                 " COALESCE(SUM(micros) FILTER (WHERE kind = 'reserve'), 0),"
                 " COALESCE(SUM(micros) FILTER (WHERE kind = 'charge'), 0),"
                 " COALESCE(SUM(micros) FILTER (WHERE kind = 'release'), 0) "
                 "FROM ledger WHERE org_id = $1",
                 &p, &r, NULL, "ledger totals");
    if (rc)
        return rc;
    for (int i = 0; i < 4; i++)
        v[i] = col_i64(r, 0, i);
    PQclear(r);
    return 0;
}

static int pg_ledger_totals(struct eph_store *base, const char *org_id, int64_t *credits,
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
    return run(s, c,
               "INSERT INTO api_keys (id, org_id, key_hash, role, created_at, prefix) "
               "VALUES ($1, $2, $3, $4, $5, $6)",
               &p, NULL, NULL, "key insert");
}

static int pg_key_insert(struct eph_store *base, const char *org_id, const char *key_hash,
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
    int rc =
        run(s, c, "SELECT org_id, role FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL",
            &p, &r, NULL, "key lookup");
    if (rc)
        return rc;
    if (PQntuples(r)) {
        col_copy(r, 0, 0, org_id, idlen);
        col_copy(r, 0, 1, role, rolelen);
    } else {
        rc = -ENOENT;
    }
    PQclear(r);
    return rc;
}

static int pg_key_lookup(struct eph_store *base, const char *key_hash, char *org_id, size_t idlen,
                         char *role, size_t rolelen)
{
    struct pg_store *s = P(base);
    return WITH_CONN(s, key_lookup_once(s, c, key_hash, org_id, idlen, role, rolelen));
}

/* Runs a SELECT and hands the whole result back (the caller walks it without a connection held,
 * so callbacks may call into the store). */
static int select_once(struct pg_store *s, struct pg_conn *c, const char *sql, struct params *p,
                       PGresult **out, const char *what)
{
    return run(s, c, sql, p, out, NULL, what);
}

static int pg_key_list(struct eph_store *base, const char *org_id, eph_key_cb cb, void *ctx)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, org_id);
    PGresult *r = NULL;
    int rc = WITH_CONN(s, select_once(s, c,
                                      "SELECT id, role, COALESCE(prefix, ''), created_at FROM "
                                      "api_keys WHERE org_id = $1 AND revoked_at IS NULL "
                                      "ORDER BY created_at, id",
                                      &p, &r, "key list"));
    for (int i = 0; !rc && i < PQntuples(r); i++) {
        struct eph_key_info k;
        memset(&k, 0, sizeof(k));
        col_copy(r, i, 0, k.id, sizeof(k.id));
        col_copy(r, i, 1, k.role, sizeof(k.role));
        col_copy(r, i, 2, k.prefix, sizeof(k.prefix));
        k.created_at_ms = col_i64(r, i, 3);
        rc = cb(&k, ctx);
    }
    PQclear(r);
    return rc;
}

static int changed_once(struct pg_store *s, struct pg_conn *c, const char *sql, struct params *p,
                        unsigned long *n, const char *what)
{
    return run(s, c, sql, p, NULL, n, what);
}

static int pg_key_revoke(struct eph_store *base, const char *org_id, const char *key_id,
                         int64_t now_ms)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_i64(&p, now_ms);
    p_text(&p, key_id);
    p_text(&p, org_id);
    unsigned long n = 0;
    int rc = WITH_CONN(s, changed_once(s, c,
                                       "UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND "
                                       "org_id = $3 AND revoked_at IS NULL",
                                       &p, &n, "key revoke"));
    return rc ? rc : n ? 0 : -ENOENT;
}

/* ---- connections ---- */

static int pg_conn_insert(struct eph_store *base, const char *org_id,
                          const struct eph_connection *cn, char *conn_id, size_t idlen)
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
    rc = WITH_CONN(s, changed_once(s, c,
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
    col_copy(r, i, 0, cn->id, sizeof(cn->id));
    col_copy(r, i, 1, cn->name, sizeof(cn->name));
    cn->base_url = col_strdup(r, i, 2);
    cn->methods = col_json(r, i, 3);
    cn->path_prefixes = col_json(r, i, 4);
    cn->header_names = col_json(r, i, 5);
    size_t len = 0;
    unsigned char *b = PQunescapeBytea((const unsigned char *)val(r, i, 6), &len);
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
    cn->created_at_ms = col_i64(r, i, 7);
    cn->query_names = col_json(r, i, 8);
    if (!cn->base_url || !cn->methods || !cn->path_prefixes || !cn->header_names ||
        !cn->query_names || (len && !cn->sealed)) {
        eph_connection_release(cn);
        return -ENOMEM;
    }
    return 0;
}

static int pg_conn_list(struct eph_store *base, const char *org_id, eph_conn_cb cb, void *ctx)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, org_id);
    PGresult *r = NULL;
    int rc = WITH_CONN(s, select_once(s, c,
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

static int pg_conn_get(struct eph_store *base, const char *org_id, const char *name,
                       struct eph_connection *out)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, org_id);
    p_text(&p, name);
    PGresult *r = NULL;
    int rc = WITH_CONN(s, select_once(s, c,
                                      "SELECT " CONN_COLUMNS
                                      " FROM connections WHERE org_id = $1 AND name = $2",
                                      &p, &r, "connection get"));
    if (!rc)
        rc = PQntuples(r) ? row_to_conn(r, 0, out) : -ENOENT;
    PQclear(r);
    return rc;
}

static int pg_conn_delete(struct eph_store *base, const char *org_id, const char *name_or_id)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, org_id);
    p_text(&p, name_or_id);
    unsigned long n = 0;
    int rc = WITH_CONN(s, changed_once(s, c,
                                       "DELETE FROM connections WHERE org_id = $1 AND "
                                       "(name = $2 OR id = $2)",
                                       &p, &n, "connection delete"));
    return rc ? rc : n ? 0 : -ENOENT;
}

/* ---- images ---- */

#define IMAGE_COLUMNS                                                                              \
    "org_id, name, status, digest, size_bytes, recipe, created_at, error, log_path"

static int row_to_image(const PGresult *r, int i, struct eph_image_rec *out)
{
    memset(out, 0, sizeof(*out));
    col_copy(r, i, 0, out->org_id, sizeof(out->org_id));
    col_copy(r, i, 1, out->name, sizeof(out->name));
    col_copy(r, i, 2, out->status, sizeof(out->status));
    col_copy(r, i, 3, out->digest, sizeof(out->digest));
    out->size_bytes = col_i64(r, i, 4);
    out->recipe = col_json(r, i, 5);
    out->created_at_ms = col_i64(r, i, 6);
    out->error = col_strdup(r, i, 7);
    out->log_path = col_strdup(r, i, 8);
    if (!out->recipe) {
        eph_image_rec_release(out);
        return -ENOMEM;
    }
    return 0;
}

static int pg_image_write(struct eph_store *base, const struct eph_image_rec *im, bool insert)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, im->org_id);
    p_text(&p, im->name);
    p_text(&p, im->status);
    p_text(&p, im->digest);
    p_i64(&p, im->size_bytes);
    p_json(&p, im->recipe, "{}");
    p_text(&p, im->error);
    p_text(&p, im->log_path);
    p_i64(&p, im->created_at_ms);
    unsigned long n = 0;
    int rc = WITH_CONN(s, changed_once(s, c,
                                       insert ? "INSERT INTO images (" IMAGE_COLUMNS
                                                ") VALUES ($1, $2, $3, $4, $5, $6, $9, $7, $8)"
                                              : "UPDATE images SET status = $3, digest = $4, "
                                                "size_bytes = $5, recipe = $6, error = $7, "
                                                "log_path = $8 WHERE org_id = $1 AND name = $2 AND "
                                                "created_at = $9",
                                       &p, &n, insert ? "image insert" : "image update"));
    p_free(&p);
    return rc ? rc : n ? 0 : -ENOENT;
}

static int pg_image_insert(struct eph_store *base, const struct eph_image_rec *r)
{
    return pg_image_write(base, r, true);
}

static int pg_image_update(struct eph_store *base, const struct eph_image_rec *r)
{
    return pg_image_write(base, r, false);
}

static int pg_image_get(struct eph_store *base, const char *org_id, const char *name,
                        struct eph_image_rec *out)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, org_id);
    p_text(&p, name);
    PGresult *r = NULL;
    int rc = WITH_CONN(s, select_once(s, c,
                                      "SELECT " IMAGE_COLUMNS " FROM images WHERE name = $2 AND "
                                      "(org_id = $1 OR org_id = '') ORDER BY org_id = '' LIMIT 1",
                                      &p, &r, "image get"));
    if (!rc)
        rc = PQntuples(r) ? row_to_image(r, 0, out) : -ENOENT;
    PQclear(r);
    return rc;
}

static int pg_image_list(struct eph_store *base, const char *org_id, eph_image_cb cb, void *ctx)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, org_id);
    PGresult *r = NULL;
    int rc = WITH_CONN(s, select_once(s, c,
                                      "SELECT " IMAGE_COLUMNS " FROM images WHERE org_id = $1 OR "
                                      "(org_id = '' AND name NOT IN (SELECT name FROM images "
                                      "WHERE org_id = $1)) ORDER BY name",
                                      &p, &r, "image list"));
    for (int i = 0; !rc && i < PQntuples(r); i++) {
        struct eph_image_rec im;
        if (!(rc = row_to_image(r, i, &im))) {
            rc = cb(&im, ctx);
            eph_image_rec_release(&im);
        }
    }
    PQclear(r);
    return rc;
}

static int pg_image_delete(struct eph_store *base, const char *org_id, const char *name)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, org_id);
    p_text(&p, name);
    unsigned long n = 0;
    /* One statement: the image goes only when no unfinished run names it. */
    int rc = WITH_CONN(s, changed_once(s, c,
                                       "DELETE FROM images WHERE org_id = $1 AND name = $2 AND "
                                       "NOT EXISTS (SELECT 1 FROM runs WHERE image = $2 AND "
                                       "($1 = '' OR org_id = $1) AND "
                                       "status IN ('queued', 'starting', 'running'))",
                                       &p, &n, "image delete"));
    if (rc || n)
        return rc;
    /* Nothing deleted: missing, or in use. */
    PGresult *r = NULL;
    rc = WITH_CONN(s, select_once(s, c, "SELECT 1 FROM images WHERE org_id = $1 AND name = $2", &p,
                                  &r, "image delete"));
    if (!rc)
        rc = PQntuples(r) ? -EBUSY : -ENOENT;
    PQclear(r);
    return rc;
}

/* ---- runs ---- */

static int count_queued_once(struct pg_store *s, struct pg_conn *c, const char *org_id,
                             unsigned *out)
{
    struct params p = {0};
    p_text(&p, org_id);
    PGresult *r = NULL;
    int rc = run(s, c, "SELECT COUNT(*) FROM runs WHERE org_id = $1 AND status = 'queued'", &p, &r,
                 NULL, "count queued");
    if (!rc) {
        *out = (unsigned)col_i64(r, 0, 0);
        PQclear(r);
    }
    return rc;
}

static int pg_runs_count_queued(struct eph_store *base, const char *org_id, unsigned *out)
{
    struct pg_store *s = P(base);
    return WITH_CONN(s, count_queued_once(s, c, org_id, out));
}

static int pg_runs_count_by_status(struct eph_store *base, eph_status_count_cb cb, void *ctx)
{
    struct pg_store *s = P(base);
    PGresult *r = NULL;
    int rc = WITH_CONN(s, select_once(s, c,
                                      "SELECT status, COUNT(*) FROM runs GROUP BY status "
                                      "ORDER BY status",
                                      NULL, &r, "count by status"));
    for (int i = 0; !rc && i < PQntuples(r); i++)
        rc = cb(val(r, i, 0), (uint64_t)col_i64(r, i, 1), ctx);
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

static int event_insert(struct pg_store *s, struct pg_conn *c, const char *run_id,
                        const struct eph_event *e)
{
    struct params p = {0};
    p_event(&p, run_id, e);
    /* The notification rides the same transaction: listeners hear of the event when it is
     * committed, never before. The payload is the run id and the seq, never the content. */
    int rc = run(
        s, c,
        "WITH ins AS (INSERT INTO events (run_id, seq, t_ms, at_ms, source, type, "
        "message, data, wire) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING run_id, seq, "
        "type) SELECT pg_notify('eph_events', run_id || ' ' || seq || ' ' || type) "
        "FROM ins",
        &p, NULL, NULL, "event insert");
    p_free(&p);
    return rc;
}

static int run_insert_once(struct pg_store *s, struct pg_conn *c, const struct eph_run *r,
                           const struct eph_event *first, unsigned max_queued)
{
    int rc = begin(s, c);
    if (rc)
        return rc;
    /* The org's row lock serialises every reservation of the org, on every node. */
    struct eph_balance b;
    if ((rc = balance_once(s, c, r->org_id, &b, true)))
        return rc;
    if (max_queued) {
        unsigned queued = 0;
        if ((rc = count_queued_once(s, c, r->org_id, &queued)))
            return rc;
        if (queued >= max_queued)
            return -EAGAIN;
    }
    if (b.available_micros < r->cost.reserved_micros)
        return -EDQUOT;
    struct params p = {0};
    p_text(&p, r->id);
    p_text(&p, r->org_id);
    p_text(&p, eph_run_status_name(r->status));
    p_text(&p, r->model);
    p_text(&p, r->prompt);
    p_json(&p, r->files, NULL);
    p_json(&p, r->connections, "[]");
    p_json(&p, r->metadata, "{}");
    p_i64(&p, r->shell);
    p_i64(&p, r->web);
    p_i64(&p, r->zdr);
    p_i64(&p, r->timeout_seconds);
    p_i64(&p, r->created_at_ms);
    p_i64(&p, r->cost.reserved_micros);
    p_text(&p, r->node_id[0] ? r->node_id : NULL);
    p_ms(&p, r->lease_expires_at_ms);
    p_json(&p, r->web_allow, NULL);
    p_text(&p, r->replay_of);
    p_text(&p, r->image[0] ? r->image : "default");
    p_text(&p, r->image_digest[0] ? r->image_digest : NULL);
    rc = run(s, c,
             "INSERT INTO runs (id, org_id, status, model, prompt, files, connections, "
             "metadata, shell, web, zdr, timeout_seconds, created_at, reserved_micros, node_id, "
             "lease_expires_at, web_allow, replay_of, image, image_digest) "
             "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, "
             "$17, $18, $19, $20)",
             &p, NULL, NULL, "run insert");
    p_free(&p);
    if (rc)
        return rc;
    if ((rc = insert_ledger(s, c, r->org_id, r->id, "reserve", r->cost.reserved_micros,
                            r->created_at_ms)))
        return rc;
    if (first && (rc = event_insert(s, c, r->id, first)))
        return rc;
    /* Nodes waiting for work hear of it. */
    struct params q = {0};
    p_text(&q, r->id);
    if ((rc = run(s, c, "SELECT pg_notify('eph_queued', $1)", &q, NULL, NULL, "notify")))
        return rc;
    return commit(s, c);
}

static int pg_run_insert_capped(struct eph_store *base, const struct eph_run *r,
                                const struct eph_event *first, unsigned max_queued)
{
    struct pg_store *s = P(base);
    /* A retried insert whose first commit went through finds its own run: -EEXIST, and the
     * API's idempotency record tells the client. */
    return WITH_CONN(s, run_insert_once(s, c, r, first, max_queued));
}

static int pg_run_insert(struct eph_store *base, const struct eph_run *r,
                         const struct eph_event *first)
{
    return pg_run_insert_capped(base, r, first, 0);
}

#define RUN_COLUMNS                                                                                \
    "id, org_id, status, model, prompt, files, connections, metadata, shell, web, zdr, "           \
    "timeout_seconds, created_at, started_at, finished_at, result, error_type, error_code, "       \
    "error_message, model_calls, input_tokens, output_tokens, shell_commands, web_requests, "      \
    "connection_requests, reserved_micros, model_micros, web_micros, compute_micros, "             \
    "charged_micros, released_micros, sandbox_backend, vcpus, memory_mib, log_expires_at, "        \
    "log_purged, node_id, lease_expires_at, web_allow, replay_of, divergences, image, "            \
    "image_digest"

static void row_to_run(const PGresult *res, int i, struct eph_run *r)
{
    eph_run_init(r);
    col_copy(res, i, 0, r->id, sizeof(r->id));
    col_copy(res, i, 1, r->org_id, sizeof(r->org_id));
    eph_run_status_parse(val(res, i, 2), &r->status);
    r->model = col_strdup(res, i, 3);
    r->prompt = col_strdup(res, i, 4);
    r->files = col_json(res, i, 5);
    r->connections = col_json(res, i, 6);
    r->metadata = col_json(res, i, 7);
    r->shell = col_i64(res, i, 8);
    r->web = col_i64(res, i, 9);
    r->zdr = col_i64(res, i, 10);
    r->timeout_seconds = (unsigned)col_i64(res, i, 11);
    r->created_at_ms = col_i64(res, i, 12);
    r->started_at_ms = col_i64(res, i, 13);
    r->finished_at_ms = col_i64(res, i, 14);
    r->result = col_strdup(res, i, 15);
    r->error_type = col_strdup(res, i, 16);
    r->error_code = col_strdup(res, i, 17);
    r->error_message = col_strdup(res, i, 18);
    r->usage.model_calls = (uint64_t)col_i64(res, i, 19);
    r->usage.input_tokens = (uint64_t)col_i64(res, i, 20);
    r->usage.output_tokens = (uint64_t)col_i64(res, i, 21);
    r->usage.shell_commands = (uint64_t)col_i64(res, i, 22);
    r->usage.web_requests = (uint64_t)col_i64(res, i, 23);
    r->usage.connection_requests = (uint64_t)col_i64(res, i, 24);
    r->cost.reserved_micros = col_i64(res, i, 25);
    r->cost.model_micros = col_i64(res, i, 26);
    r->cost.web_micros = col_i64(res, i, 27);
    r->cost.compute_micros = col_i64(res, i, 28);
    r->cost.charged_micros = col_i64(res, i, 29);
    r->cost.released_micros = col_i64(res, i, 30);
    r->sandbox_backend = col_strdup(res, i, 31);
    r->vcpus = (unsigned)col_i64(res, i, 32);
    r->memory_mib = (unsigned)col_i64(res, i, 33);
    r->log_expires_at_ms = col_i64(res, i, 34);
    r->log_purged = col_i64(res, i, 35);
    col_copy(res, i, 36, r->node_id, sizeof(r->node_id));
    r->lease_expires_at_ms = col_i64(res, i, 37);
    r->web_allow = col_json(res, i, 38);
    r->replay_of = col_strdup(res, i, 39);
    r->divergences = (uint64_t)col_i64(res, i, 40);
    col_copy(res, i, 41, r->image, sizeof(r->image));
    col_copy(res, i, 42, r->image_digest, sizeof(r->image_digest));
}

static int pg_run_get(struct eph_store *base, const char *id, const char *org_id,
                      struct eph_run *out)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, id);
    PGresult *r = NULL;
    int rc = WITH_CONN(
        s, select_once(s, c, "SELECT " RUN_COLUMNS " FROM runs WHERE id = $1", &p, &r, "run get"));
    if (!rc) {
        /* Another org's run is indistinguishable from no run at all. */
        if (!PQntuples(r) || (org_id && strcmp(val(r, 0, 1), org_id) != 0))
            rc = -ENOENT;
        else
            row_to_run(r, 0, out);
    }
    PQclear(r);
    return rc;
}

/* Runs the rows of a SELECT RUN_COLUMNS result through cb, at most limit (0: all). */
static int each_run(PGresult *res, unsigned limit, eph_run_cb cb, void *ctx, bool *has_more)
{
    int n = PQntuples(res), rc = 0;
    if (has_more)
        *has_more = limit && (unsigned)n > limit;
    for (int i = 0; !rc && i < n && (!limit || (unsigned)i < limit); i++) {
        struct eph_run r;
        row_to_run(res, i, &r);
        rc = cb(&r, ctx);
        eph_run_release(&r);
    }
    return rc;
}

static int pg_run_list(struct eph_store *base, const char *org_id, unsigned limit,
                       const char *after, const char *status, const json_t *metadata, eph_run_cb cb,
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
    PGresult *r = NULL;
    int rc = WITH_CONN(
        s, select_once(s, c,
                       "SELECT " RUN_COLUMNS " FROM runs WHERE org_id = $1"
                       " AND ($2::text IS NULL OR status = $2::text)"
                       " AND ($3::text IS NULL OR (created_at, seq) < "
                       "  (SELECT created_at, seq FROM runs WHERE id = $3::text AND org_id = $1))"
                       /* containment: every filter pair is one of the run's metadata pairs */
                       " AND ($5::text IS NULL OR metadata::jsonb @> $5::jsonb)"
                       " ORDER BY created_at DESC, seq DESC LIMIT $4",
                       &p, &r, "run list"));
    if (!rc)
        rc = each_run(r, limit, cb, ctx, has_more);
    PQclear(r);
    return rc;
}

static int pg_runs_in_state(struct eph_store *base, enum eph_run_status state, eph_run_cb cb,
                            void *ctx)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, eph_run_status_name(state));
    PGresult *r = NULL;
    int rc = WITH_CONN(s, select_once(s, c,
                                      "SELECT " RUN_COLUMNS
                                      " FROM runs WHERE status = $1 ORDER BY created_at, seq",
                                      &p, &r, "runs in state"));
    if (!rc)
        rc = each_run(r, 0, cb, ctx, NULL);
    PQclear(r);
    return rc;
}

static int pg_run_update(struct eph_store *base, const struct eph_run *r)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, eph_run_status_name(r->status));
    p_ms(&p, r->started_at_ms);
    p_text(&p, r->sandbox_backend);
    p_i64(&p, r->vcpus);
    p_i64(&p, r->memory_mib);
    p_text(&p, r->id);
    unsigned long n = 0;
    int rc = WITH_CONN(s, changed_once(s, c,
                                       "UPDATE runs SET status = $1, started_at = $2, "
                                       "sandbox_backend = $3, vcpus = $4, memory_mib = $5 "
                                       "WHERE id = $6 AND status IN ('queued', 'starting', "
                                       "'running')",
                                       &p, &n, "run update"));
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

static int pg_run_progress(struct eph_store *base, const struct eph_run *r)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_usage_cost(&p, r);
    p_text(&p, r->id);
    unsigned long n = 0;
    return WITH_CONN(s, changed_once(s, c,
                                     "UPDATE runs SET model_calls = $1, input_tokens = $2, "
                                     "output_tokens = $3, shell_commands = $4, web_requests = $5, "
                                     "connection_requests = $6, model_micros = $7, "
                                     "web_micros = $8, compute_micros = $9 WHERE id = $10 AND "
                                     "status IN ('queued', 'starting', 'running')",
                                     &p, &n, "run progress"));
}

static int run_finish_once(struct pg_store *s, struct pg_conn *c, const struct eph_run_final *f)
{
    const struct eph_run *r = f->run;
    int rc = begin(s, c);
    if (rc)
        return rc;
    struct params p = {0};
    p_text(&p, eph_run_status_name(r->status));
    p_i64(&p, r->finished_at_ms);
    p_text(&p, r->zdr ? NULL : r->result);
    p_text(&p, r->error_type);
    p_text(&p, r->error_code);
    p_text(&p, r->error_message);
    p_usage_cost(&p, r);
    p_i64(&p, r->cost.charged_micros);
    p_i64(&p, r->cost.released_micros);
    p_ms(&p, r->log_expires_at_ms);
    p_ms(&p, r->started_at_ms);
    p_text(&p, r->sandbox_backend);
    p_text(&p, r->id);
    p_i64(&p, f->lease_expired_before_ms);
    p_i64(&p, (int64_t)r->divergences);
    unsigned long n = 0;
    if ((rc = run(s, c,
                  "UPDATE runs SET status = $1, finished_at = $2, result = $3, error_type = $4, "
                  "error_code = $5, error_message = $6, model_calls = $7, input_tokens = $8, "
                  "output_tokens = $9, shell_commands = $10, web_requests = $11, "
                  "connection_requests = $12, model_micros = $13, web_micros = $14, "
                  "compute_micros = $15, charged_micros = $16, released_micros = $17, "
                  "log_expires_at = $18, started_at = COALESCE(started_at, $19), "
                  "sandbox_backend = COALESCE($20, sandbox_backend), divergences = $23 "
                  "WHERE id = $21 AND status IN ('queued', 'starting', 'running') "
                  "AND ($22::bigint = 0 OR lease_expires_at < $22::bigint)",
                  &p, NULL, &n, "run finish")))
        return rc;
    if (n == 0)
        return -EALREADY;
    int64_t now = r->finished_at_ms;
    if ((rc = insert_ledger(s, c, r->org_id, r->id, "charge", r->cost.charged_micros, now)) ||
        (rc = insert_ledger(s, c, r->org_id, r->id, "release", r->cost.released_micros, now)))
        return rc;
    for (size_t i = 0; i < f->nevents; i++)
        if ((rc = event_insert(s, c, r->id, &f->events[i])))
            return rc;
    return commit(s, c);
}

static int pg_run_finish(struct eph_store *base, const struct eph_run_final *f)
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

static int pg_run_claim(struct eph_store *base, const char *run_id, const char *node_id,
                        int64_t lease_until_ms)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, node_id);
    p_i64(&p, lease_until_ms);
    p_text(&p, run_id);
    unsigned long n = 0;
    int rc = WITH_CONN(s, changed_once(s, c,
                                       "UPDATE runs SET node_id = $1, lease_expires_at = $2 "
                                       "WHERE id = $3 AND status = 'queued' AND "
                                       "(node_id IS NULL OR node_id = $1)",
                                       &p, &n, "run claim"));
    return rc ? rc : n ? 0 : -EALREADY;
}

static int pg_run_renew(struct eph_store *base, const char *run_id, const char *node_id,
                        int64_t lease_until_ms, int64_t compute_micros)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_i64(&p, lease_until_ms);
    p_i64(&p, compute_micros);
    p_text(&p, run_id);
    p_text(&p, node_id);
    unsigned long n = 0;
    int rc = WITH_CONN_URGENT(s, changed_once(s, c,
                                              "UPDATE runs SET lease_expires_at = $1, "
                                              "compute_micros = "
                                              "GREATEST(compute_micros, LEAST($2::bigint, "
                                              "reserved_micros - model_micros - web_micros)) "
                                              "WHERE id = $3 AND node_id = $4 AND status IN "
                                              "('queued', 'starting', 'running')",
                                              &p, &n, "run renew"));
    return rc ? rc : n ? 0 : -ESTALE;
}

static int pg_runs_lease_expired(struct eph_store *base, int64_t now_ms, eph_run_cb cb, void *ctx)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_i64(&p, now_ms);
    PGresult *r = NULL;
    int rc =
        WITH_CONN_URGENT(s, select_once(s, c,
                                        "SELECT " RUN_COLUMNS " FROM runs WHERE status IN "
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
    int rc = begin(s, c);
    if (rc)
        return rc;
    struct params p = {0};
    p_i64(&p, now_ms);
    if ((rc = run(s, c,
                  "UPDATE events SET message = type, data = '{}', wire = NULL WHERE run_id IN "
                  "(SELECT id FROM runs WHERE log_purged = 0 AND log_expires_at <= $1)",
                  &p, NULL, NULL, "purge events")))
        return rc;
    unsigned long n = 0;
    if ((rc = run(s, c,
                  "UPDATE runs SET prompt = NULL, files = NULL, result = NULL, log_purged = 1 "
                  "WHERE log_purged = 0 AND log_expires_at <= $1",
                  &p, NULL, &n, "purge runs")))
        return rc;
    *purged = (unsigned)n;
    return commit(s, c);
}

static int pg_purge_logs(struct eph_store *base, int64_t now_ms, unsigned *purged)
{
    struct pg_store *s = P(base);
    return WITH_CONN(s, purge_once(s, c, now_ms, purged));
}

/* ---- events ---- */

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
    int rc = run(s, c,
                 "WITH live AS (SELECT id FROM runs WHERE id = $1 AND status IN ('queued', "
                 "'starting', 'running') FOR SHARE), ins AS (INSERT INTO events (run_id, seq, "
                 "t_ms, at_ms, source, type, message, data, wire) SELECT id, $2::bigint, "
                 "$3::bigint, $4::bigint, $5::text, $6::text, $7::text, $8::text, $9::text FROM "
                 "live RETURNING run_id, seq, type) SELECT pg_notify('eph_events', run_id || ' ' "
                 "|| seq || ' ' || type) FROM ins",
                 &p, &r, NULL, "event append");
    p_free(&p);
    if (!rc && PQntuples(r) == 0)
        rc = -ESTALE;
    PQclear(r);
    return rc;
}

static int pg_event_append(struct eph_store *base, const char *run_id, const struct eph_event *e)
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

static int pg_events_list(struct eph_store *base, const char *run_id, uint64_t after_seq,
                          unsigned limit, eph_event_cb cb, void *ctx)
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
    int rc =
        WITH_CONN(s, select_once(s, c,
                                 "SELECT seq, t_ms, at_ms, source, type, message, data, wire FROM "
                                 "events WHERE run_id = $1 AND seq > $2 ORDER BY seq "
                                 "LIMIT $3::bigint",
                                 &p, &r, "events list"));
    for (int i = 0; !rc && i < PQntuples(r); i++) {
        struct eph_event e;
        memset(&e, 0, sizeof(e));
        e.seq = (uint64_t)col_i64(r, i, 0);
        e.t_ms = col_i64(r, i, 1);
        e.at_ms = col_i64(r, i, 2);
        col_copy(r, i, 3, e.source, sizeof(e.source));
        col_copy(r, i, 4, e.type, sizeof(e.type));
        e.message = col_strdup(r, i, 5);
        e.wire = col_strdup(r, i, 7);
        e.data = eph_event_stored_data(e.wire, isnull(r, i, 6) ? NULL : val(r, i, 6));
        rc = cb(&e, ctx);
        eph_event_release(&e);
    }
    PQclear(r);
    return rc;
}

/* ---- idempotency ---- */

static int idem_begin_once(struct pg_store *s, struct pg_conn *c, const char *org_id,
                           const char *key, const char *request_hash, const char *pending,
                           int64_t now_ms, int64_t expired_before_ms, struct eph_idem *existing)
{
    int rc = begin(s, c);
    if (rc)
        return rc;
    struct params p = {0};
    p_text(&p, org_id);
    p_text(&p, key);
    p_i64(&p, expired_before_ms);
    /* An expired key is gone, whether or not the reaper has come by yet. */
    if ((rc =
             run(s, c, "DELETE FROM idempotency WHERE org_id = $1 AND key = $2 AND created_at < $3",
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
    if ((rc = run(s, c,
                  "INSERT INTO idempotency (org_id, key, request_hash, created_at, "
                  "response_body) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (org_id, key) DO "
                  "NOTHING",
                  &q, NULL, &n, "idempotency insert")))
        return rc;
    if (n == 1)
        return commit(s, c);
    PGresult *r = NULL;
    struct params k = {0};
    p_text(&k, org_id);
    p_text(&k, key);
    if ((rc = run(s, c,
                  "SELECT request_hash, status_code, response_body, created_at FROM idempotency "
                  "WHERE org_id = $1 AND key = $2",
                  &k, &r, NULL, "idempotency lookup")))
        return rc;
    if (PQntuples(r)) {
        col_copy(r, 0, 0, existing->request_hash, sizeof(existing->request_hash));
        existing->status_code = (int)col_i64(r, 0, 1);
        existing->response_body = col_strdup(r, 0, 2);
        existing->created_at_ms = col_i64(r, 0, 3);
        rc = -EEXIST;
    } else {
        rc = -EBUSY; /* abandoned between our insert and our read: the client retries */
    }
    PQclear(r);
    return rc;
}

static int pg_idem_begin(struct eph_store *base, const char *org_id, const char *key,
                         const char *request_hash, const char *pending, int64_t now_ms,
                         int64_t expired_before_ms, struct eph_idem *existing)
{
    struct pg_store *s = P(base);
    return WITH_CONN(s, idem_begin_once(s, c, org_id, key, request_hash, pending, now_ms,
                                        expired_before_ms, existing));
}

static int pg_idem_complete(struct eph_store *base, const char *org_id, const char *key,
                            int status_code, const char *body)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_i64(&p, status_code);
    p_text(&p, body);
    p_text(&p, org_id);
    p_text(&p, key);
    unsigned long n = 0;
    return WITH_CONN(s, changed_once(s, c,
                                     "UPDATE idempotency SET status_code = $1, response_body = $2 "
                                     "WHERE org_id = $3 AND key = $4",
                                     &p, &n, "idempotency complete"));
}

static int pg_idem_abandon(struct eph_store *base, const char *org_id, const char *key)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, org_id);
    p_text(&p, key);
    unsigned long n = 0;
    return WITH_CONN(s, changed_once(s, c,
                                     "DELETE FROM idempotency WHERE org_id = $1 AND key = $2 AND "
                                     "status_code = 0",
                                     &p, &n, "idempotency abandon"));
}

static int pg_idem_expire(struct eph_store *base, int64_t cutoff_ms)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_i64(&p, cutoff_ms);
    unsigned long n = 0;
    return WITH_CONN(s, changed_once(s, c, "DELETE FROM idempotency WHERE created_at < $1", &p, &n,
                                     "idempotency expire"));
}

static int idem_recover_once(struct pg_store *s, struct pg_conn *c, int64_t stale_before_ms,
                             unsigned long *completed, unsigned long *dropped)
{
    struct params none = {0};
    /* A pending body is the create's own answer: completing it is setting its status. Bodies
     * are JSON (pending or answered), so the cast never fails. */
    int rc = run(s, c,
                 "UPDATE idempotency i SET status_code = 201 WHERE status_code = 0 AND "
                 "response_body IS NOT NULL AND EXISTS (SELECT 1 FROM runs r WHERE "
                 "r.org_id = i.org_id AND r.id = i.response_body::json->>'id')",
                 &none, NULL, completed, "idempotency recover");
    if (rc)
        return rc;
    struct params p = {0};
    p_i64(&p, stale_before_ms);
    return run(s, c,
               "DELETE FROM idempotency i WHERE status_code = 0 AND response_body IS NOT NULL AND "
               "created_at < $1 AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.org_id = i.org_id "
               "AND r.id = i.response_body::json->>'id')",
               &p, NULL, dropped, "idempotency drop stale");
}

static int pg_idem_recover(struct eph_store *base, int64_t stale_before_ms, unsigned *completed,
                           unsigned *dropped)
{
    struct pg_store *s = P(base);
    unsigned long done = 0, gone = 0;
    int rc = WITH_CONN(s, idem_recover_once(s, c, stale_before_ms, &done, &gone));
    *completed = (unsigned)done;
    *dropped = (unsigned)gone;
    return rc;
}

/* ---- notifications between nodes ---- */

static PGconn *listen_connect(struct pg_store *s)
{
    PGconn *c = PQconnectdb(s->conninfo);
    if (PQstatus(c) != CONNECTION_OK) {
        PQfinish(c);
        return NULL;
    }
    PQsetNoticeProcessor(c, NULL, NULL);
    PGresult *r = PQexec(c, "LISTEN eph_events; LISTEN eph_queued; LISTEN eph_cancel");
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    if (!ok) {
        PQfinish(c);
        return NULL;
    }
    return c;
}

static void deliver(struct pg_store *s, PGnotify *n)
{
    const struct eph_store_listener *l = &s->lis;
    if (strcmp(n->relname, "eph_events") == 0 && l->event) {
        /* "run_id seq type": written by event_insert, never by a client. */
        char id[64], type[40];
        unsigned long long seq;
        if (sscanf(n->extra, "%63s %llu %39s", id, &seq, type) == 3)
            l->event(id, seq, type, l->ctx);
    } else if (strcmp(n->relname, "eph_queued") == 0 && l->queued) {
        l->queued(n->extra, l->ctx);
    } else if (strcmp(n->relname, "eph_cancel") == 0 && l->cancel) {
        l->cancel(n->extra, l->ctx);
    }
}

static void *listen_main(void *arg)
{
    struct pg_store *s = arg;
    PGconn *c = NULL;
    unsigned backoff_ms = 100;
    while (!atomic_load(&s->stop_listening)) {
        if (!c) {
            c = listen_connect(s);
            if (!c) {
                struct timespec ts = {0, (long)backoff_ms * 1000000L};
                nanosleep(&ts, NULL);
                if (backoff_ms < 1000)
                    backoff_ms *= 2;
                continue;
            }
            backoff_ms = 100;
            /* Anything committed while nobody listened is found by looking again. */
            if (s->lis.resync)
                s->lis.resync(s->lis.ctx);
        }
        struct pollfd pfd = {.fd = PQsocket(c), .events = POLLIN};
        int pr = poll(&pfd, 1, 200);
        if (pr < 0 && errno != EINTR)
            break;
        if (pr > 0 && !PQconsumeInput(c)) {
            EPH_WARN("store", "PostgreSQL notifications lost their connection; reconnecting");
            PQfinish(c);
            c = NULL;
            continue;
        }
        PGnotify *n;
        while ((n = PQnotifies(c))) {
            deliver(s, n);
            PQfreemem(n);
        }
        if (PQstatus(c) != CONNECTION_OK) {
            PQfinish(c);
            c = NULL;
        }
    }
    if (c)
        PQfinish(c);
    return NULL;
}

static int pg_listen(struct eph_store *base, const struct eph_store_listener *l)
{
    struct pg_store *s = P(base);
    if (s->listening)
        return -EALREADY;
    s->lis = *l;
    atomic_store(&s->stop_listening, false);
    int rc = pthread_create(&s->listener, NULL, listen_main, s);
    if (rc)
        return -rc;
    s->listening = true;
    return 0;
}

static int pg_notify_cancel(struct eph_store *base, const char *run_id)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, run_id);
    return WITH_CONN(
        s, run(s, c, "SELECT pg_notify('eph_cancel', $1)", &p, NULL, NULL, "notify cancel"));
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
    PGresult *r = NULL;
    int rc = run(s, c,
                 "WITH pick AS (SELECT h.id FROM orgs o CROSS JOIN LATERAL "
                 "(SELECT COUNT(*) AS n FROM runs a WHERE a.org_id = o.id AND "
                 "a.node_id IS NOT NULL AND a.status IN ('queued', 'starting', 'running')) c "
                 "CROSS JOIN LATERAL (SELECT id, created_at, seq FROM runs WHERE org_id = o.id "
                 "AND status = 'queued' AND ((node_id IS NULL AND zdr = 0) OR "
                 "((node_id IS NULL OR node_id = $1) AND id = ANY($4::text[]))) "
                 "ORDER BY created_at, seq LIMIT 1) h WHERE $3::bigint = 0 OR c.n < $3 "
                 "ORDER BY c.n, h.created_at, h.seq LIMIT 1), "
                 "claimed AS (UPDATE runs SET node_id = $1, lease_expires_at = $2 WHERE id = "
                 "(SELECT l.id FROM runs l WHERE l.id = (SELECT id FROM pick) AND "
                 "l.status = 'queued' AND (l.node_id IS NULL OR l.node_id = $1) "
                 "FOR UPDATE SKIP LOCKED) RETURNING id) "
                 "SELECT (SELECT id FROM claimed), (SELECT id FROM pick)",
                 &p, &r, NULL, "claim next");
    if (rc)
        return rc;
    if (PQntuples(r) == 1 && !PQgetisnull(r, 0, 0))
        col_copy(r, 0, 0, run_id, idlen);
    else if (PQntuples(r) == 1 && !PQgetisnull(r, 0, 1))
        rc = -EAGAIN;
    else
        rc = -ENOENT;
    PQclear(r);
    return rc;
}

static int pg_run_claim_next(struct eph_store *base, const struct eph_claim_next *q, char *run_id,
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

unsigned long eph_store_postgres_round_trips(struct eph_store *base)
{
    struct pg_store *s = P(base);
    pthread_mutex_lock(&s->lock);
    unsigned long n = s->round_trips;
    pthread_mutex_unlock(&s->lock);
    return n;
}

void eph_store_postgres_waiters(struct eph_store *base, unsigned *ordinary, unsigned *urgent)
{
    struct pg_store *s = P(base);
    pthread_mutex_lock(&s->lock);
    *ordinary = s->ordinary_waiting;
    *urgent = s->urgent_waiting;
    pthread_mutex_unlock(&s->lock);
}

const struct eph_store_ops eph_store_postgres_ops = {
    .name = "postgres",
    .shared = true,
    .open = pg_open,
    .close = pg_close,
    .ping = pg_ping,
    .org_ensure = pg_org_ensure,
    .org_find = pg_org_find,
    .credit_add = pg_credit_add,
    .key_insert = pg_key_insert,
    .key_lookup = pg_key_lookup,
    .balance = pg_balance,
    .key_list = pg_key_list,
    .key_revoke = pg_key_revoke,
    .conn_insert = pg_conn_insert,
    .conn_list = pg_conn_list,
    .conn_get = pg_conn_get,
    .conn_delete = pg_conn_delete,
    .image_insert = pg_image_insert,
    .image_update = pg_image_update,
    .image_get = pg_image_get,
    .image_list = pg_image_list,
    .image_delete = pg_image_delete,
    .run_insert = pg_run_insert,
    .run_insert_capped = pg_run_insert_capped,
    .runs_count_queued = pg_runs_count_queued,
    .runs_count_by_status = pg_runs_count_by_status,
    .run_get = pg_run_get,
    .run_list = pg_run_list,
    .run_update = pg_run_update,
    .run_progress = pg_run_progress,
    .run_finish = pg_run_finish,
    .runs_in_state = pg_runs_in_state,
    .run_claim = pg_run_claim,
    .run_renew = pg_run_renew,
    .runs_lease_expired = pg_runs_lease_expired,
    .run_claim_next = pg_run_claim_next,
    .listen = pg_listen,
    .notify_cancel = pg_notify_cancel,
    .purge_logs = pg_purge_logs,
    .event_append = pg_event_append,
    .events_list = pg_events_list,
    .idem_begin = pg_idem_begin,
    .idem_complete = pg_idem_complete,
    .idem_abandon = pg_idem_abandon,
    .idem_expire = pg_idem_expire,
    .idem_recover = pg_idem_recover,
    .writable = pg_writable,
    .ledger_totals = pg_ledger_totals,
};

/* One comma-separated item of a libpq list ("a,b,c"), or the last one when the list is shorter
 * (libpq's rule for a single port shared by every host). */
static void list_item(const char *list, size_t i, char *out, size_t cap)
{
    out[0] = '\0';
    if (!list)
        return;
    const char *p = list;
    for (size_t k = 0; k < i; k++) {
        const char *c = strchr(p, ',');
        if (!c)
            break;
        p = c + 1;
    }
    size_t n = strcspn(p, ",");
    if (n < cap) {
        memcpy(out, p, n);
        out[n] = '\0';
    }
}

size_t eph_store_postgres_servers(const char *target, struct sockaddr_storage *out, size_t max)
{
    char *conninfo = strdup(target);
    if (!conninfo)
        return 0;
    (void)take_pool_size(conninfo);
    char *msg = NULL;
    PQconninfoOption *opts = PQconninfoParse(conninfo, &msg);
    free(conninfo);
    PQfreemem(msg);
    if (!opts)
        return 0;
    const char *hosts = NULL, *addrs = NULL, *ports = NULL;
    for (PQconninfoOption *o = opts; o->keyword; o++) {
        if (!o->val || !o->val[0])
            continue;
        if (strcmp(o->keyword, "host") == 0)
            hosts = o->val;
        else if (strcmp(o->keyword, "hostaddr") == 0)
            addrs = o->val;
        else if (strcmp(o->keyword, "port") == 0)
            ports = o->val;
    }
    /* What libpq itself falls back to. */
    if (!hosts && !addrs)
        hosts = getenv("PGHOST");
    if (!ports)
        ports = getenv("PGPORT");
    const char *names = addrs ? addrs : hosts;
    size_t n = 0, items = 1;
    for (const char *c = names; c && *c; c++)
        items += *c == ',';
    for (size_t i = 0; names && n < max && i < items; i++) {
        char name[256], port[16];
        list_item(names, i, name, sizeof(name));
        list_item(ports, i, port, sizeof(port));
        if (!port[0])
            snprintf(port, sizeof(port), "5432");
        /* An empty item or a directory is a Unix socket: nothing a TCP client reaches. A port
         * libpq would refuse reaches nothing either. */
        char *end = NULL;
        unsigned long pv = strtoul(port, &end, 10);
        if (!name[0] || name[0] == '/' || name[0] == '@' || !end || *end || pv < 1 || pv > 65535)
            continue;
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
        struct addrinfo *res = NULL;
        if (getaddrinfo(name, port, &hints, &res) != 0)
            continue;
        for (struct addrinfo *ai = res; ai && n < max; ai = ai->ai_next)
            if (ai->ai_addrlen <= sizeof(out[n])) {
                memset(&out[n], 0, sizeof(out[n]));
                memcpy(&out[n], ai->ai_addr, ai->ai_addrlen);
                n++;
            }
        freeaddrinfo(res);
    }
    PQconninfoFree(opts);
    return n;
}
