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
 *
 * This file holds the pool, its retry rule, statements, open and the ops table; the operations
 * are in postgres_orgs.c, postgres_runs.c, postgres_idem.c and postgres_notify.c
 * (postgres_store.h).
 */
#include <errno.h>
#include <netdb.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

#include "common/clock.h"
#include "common/log.h"
#include "store/migrations.h"
#include "store/postgres_store.h"
#include "store/store.h"

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
struct pg_conn *pg_pool_get_as(struct pg_store *s, bool urgent)
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

struct pg_conn *pg_pool_get(struct pg_store *s)
{
    return pg_pool_get_as(s, false);
}

void pg_pool_put(struct pg_store *s, struct pg_conn *c)
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

static void count_round_trip(struct pg_store *s)
{
    pthread_mutex_lock(&s->lock);
    s->round_trips++;
    pthread_mutex_unlock(&s->lock);
}

/* The name of sql's prepared statement on c, preparing it on first use (*cached false: the cache
 * is full, run it unprepared). */
static int stmt_name(struct pg_store *s, struct pg_conn *c, const char *sql, char name[16],
                     bool *cached, const char *what)
{
    unsigned i;
    for (i = 0; i < c->nprepared; i++)
        if (c->prepared[i] == sql)
            break;
    *cached = i < c->nprepared;
    if (!*cached && c->nprepared < STMT_CACHE) {
        snprintf(name, 16, "s%u", c->nprepared);
        PGresult *r = PQprepare(c->c, name, sql, 0, NULL);
        count_round_trip(s);
        int rc = PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : pg_err(c, r, what);
        PQclear(r);
        if (rc)
            return rc;
        c->prepared[c->nprepared++] = sql;
        *cached = true;
    } else {
        snprintf(name, 16, "s%u", i);
    }
    return 0;
}

/* Runs a prepared statement (preparing it on first use on this connection). *out gets the result
 * of a statement that returns rows (the caller clears it); NULL out: none expected. *changed gets
 * the number of rows affected when not NULL. */
int pg_exec(struct pg_store *s, struct pg_conn *c, const char *sql, struct params *p,
            PGresult **out, unsigned long *changed, const char *what)
{
    char name[16];
    bool cached;
    int prc = stmt_name(s, c, sql, name, &cached, what);
    if (prc)
        return prc;
    int n = p ? p->n : 0;
    PGresult *r = cached ? PQexecPrepared(c->c, name, n, p ? p->v : NULL, p ? p->len : NULL,
                                          p ? p->fmt : NULL, 0)
                         : PQexecParams(c->c, sql, n, NULL, p ? p->v : NULL, p ? p->len : NULL,
                                        p ? p->fmt : NULL, 0);
    count_round_trip(s);
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

/* The results of a batch, in order: the first failure is the batch's (a guard's division by zero
 * its errno), every one is read whatever happens, then the sync's. */
static int batch_results(struct pg_conn *c, const struct pg_batch *b, size_t sent)
{
    int rc = 0;
    for (size_t i = 0; i < sent && conn_ok(c); i++) {
        PGresult *r;
        while ((r = PQgetResult(c->c))) {
            ExecStatusType st = PQresultStatus(r);
            if (!rc && st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
                const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
                if (b->v[i].guard && state && strcmp(state, "22012") == 0)
                    rc = b->v[i].guard;
                else
                    rc = pg_err(c, r, b->v[i].what);
            }
            PQclear(r);
        }
    }
    PGresult *r = conn_ok(c) ? PQgetResult(c->c) : NULL;
    if (PQresultStatus(r) != PGRES_PIPELINE_SYNC && !rc)
        rc = r ? pg_err(c, r, "batch") : -ENOTCONN;
    PQclear(r);
    return rc;
}

int pg_batch_run(struct pg_store *s, struct pg_conn *c, const struct pg_batch *b)
{
    char names[PG_BATCH_MAX][16];
    bool cached[PG_BATCH_MAX];
    for (size_t i = 0; i < b->n; i++) {
        int rc = stmt_name(s, c, b->v[i].sql, names[i], &cached[i], b->v[i].what);
        if (rc)
            return rc;
    }
    if (PQenterPipelineMode(c->c) != 1)
        return pg_err(c, NULL, "batch");
    int rc = 0;
    size_t sent = 0;
    for (; sent < b->n; sent++) {
        const struct params *p = &b->v[sent].p;
        int ok = cached[sent]
                     ? PQsendQueryPrepared(c->c, names[sent], p->n, p->v, p->len, p->fmt, 0)
                     : PQsendQueryParams(c->c, b->v[sent].sql, p->n, NULL, p->v, p->len, p->fmt, 0);
        if (!ok) {
            rc = pg_err(c, NULL, b->v[sent].what);
            break;
        }
    }
    /* The sync ends the implicit transaction: committed, or rolled back at the first error. */
    if (PQpipelineSync(c->c) != 1 && !rc)
        rc = pg_err(c, NULL, "batch");
    count_round_trip(s);
    int rrc = batch_results(c, b, sent);
    if (!rc)
        rc = rrc;
    if (PQexitPipelineMode(c->c) != 1) {
        /* Results left unread (a broken exchange): the connection cannot serve a plain query
         * again. Dropped; the next user reconnects. */
        PQfinish(c->c);
        c->c = NULL;
        if (!rc)
            rc = -ENOTCONN;
    }
    return rc;
}

struct params *pg_batch_add(struct pg_batch *b, const char *sql, const char *what, int guard)
{
    if (b->n == PG_BATCH_MAX)
        return NULL;
    b->v[b->n].sql = sql;
    b->v[b->n].what = what;
    b->v[b->n].guard = guard;
    return &b->v[b->n++].p;
}

void pg_batch_free(struct pg_batch *b)
{
    if (!b)
        return;
    for (size_t i = 0; i < b->n; i++)
        p_free(&b->v[i].p);
    free(b);
}

static int pg_exec_simple(struct pg_store *s, struct pg_conn *c, const char *sql, const char *what)
{
    return pg_exec(s, c, sql, NULL, NULL, NULL, what);
}

int pg_begin(struct pg_store *s, struct pg_conn *c)
{
    return pg_exec_simple(s, c, "BEGIN", "begin");
}

int pg_commit(struct pg_store *s, struct pg_conn *c)
{
    return pg_exec_simple(s, c, "COMMIT", "commit");
}

void pg_rollback(struct pg_conn *c)
{
    if (conn_ok(c) && PQtransactionStatus(c->c) != PQTRANS_IDLE)
        PQclear(PQexec(c->c, "ROLLBACK"));
}

/* Back-off between retries of an operation whose connection failed: false when out of tries. */
bool pg_retry_wait(struct pg_store *s, unsigned attempt)
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

/* ---- columns ---- */

bool pg_isnull(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col);
}

const char *pg_val(const PGresult *r, int row, int col)
{
    return PQgetvalue(r, row, col);
}

int64_t pg_col_i64(const PGresult *r, int row, int col)
{
    return pg_isnull(r, row, col) ? 0 : strtoll(pg_val(r, row, col), NULL, 10);
}

char *pg_col_strdup(const PGresult *r, int row, int col)
{
    return pg_isnull(r, row, col) ? NULL : strdup(pg_val(r, row, col));
}

int pg_col_dup(const PGresult *r, int row, int col, char **out)
{
    *out = pg_col_strdup(r, row, col);
    return !*out && !pg_isnull(r, row, col) ? -ENOMEM : 0;
}

json_t *pg_col_json(const PGresult *r, int row, int col)
{
    return pg_isnull(r, row, col) ? NULL : json_loads(pg_val(r, row, col), JSON_DECODE_ANY, NULL);
}

void pg_col_copy(const PGresult *r, int row, int col, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s", pg_isnull(r, row, col) ? "" : pg_val(r, row, col));
}

/* ---- open / close ---- */

struct pg_migrator {
    struct pg_store *s;
    struct pg_conn *c;
};

static int mg_recorded(void *db, int version)
{
    struct pg_migrator *m = db;
    struct params p = {0};
    p_i64(&p, version);
    PGresult *have = NULL;
    int rc = pg_exec(m->s, m->c, "SELECT 1 FROM schema_migrations WHERE version = $1::integer", &p,
                     &have, NULL, "migration check");
    if (rc)
        return rc;
    int n = PQntuples(have);
    PQclear(have);
    return n ? 1 : 0;
}

static int mg_apply(void *db, const struct eph_migration *mig)
{
    struct pg_migrator *m = db;
    PGresult *r = PQexec(m->c->c, mig->sql);
    int rc = PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : pg_err(m->c, r, mig->name);
    PQclear(r);
    if (rc)
        return rc;
    struct params q = {0};
    p_i64(&q, mig->version);
    p_text(&q, mig->name);
    p_i64(&q, eph_clock_real_ms());
    return pg_exec(m->s, m->c, "INSERT INTO schema_migrations VALUES ($1, $2, $3)", &q, NULL, NULL,
                   "record migration");
}

/* Every migration in one transaction, under an advisory lock, so that nodes starting together
 * apply each once. */
static int apply_migrations(struct pg_store *s, struct pg_conn *c)
{
    int rc = pg_begin(s, c);
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
    struct pg_migrator pm = {.s = s, .c = c};
    const struct eph_migrator mg = {.db = &pm, .recorded = mg_recorded, .apply = mg_apply};
    if (!rc)
        rc = eph_migrations_run(&mg, eph_postgres_migrations, eph_postgres_migrations_count);
    if (!rc)
        rc = pg_commit(s, c);
    if (rc)
        pg_rollback(c);
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
    return pg_exec_simple(s, c, "SELECT 1", "ping");
}

static int pg_ping(struct eph_store *base)
{
    /* No retry loop: health checks want the answer now. */
    struct pg_store *s = P(base);
    struct pg_conn *c = pg_pool_get(s);
    if (!c)
        return -ENOTCONN;
    int rc = ping_once(s, c);
    pg_pool_put(s, c);
    return rc;
}

/* A server that refuses writes (a standby, default_transaction_read_only) reads fine: ask it.
 * A full disk on the server is not seen here; the writes that fail say it (docs/STORE.md). */
static int pg_writable(struct eph_store *base, char *why, size_t whylen)
{
    struct pg_store *s = P(base);
    struct pg_conn *c = pg_pool_get(s);
    if (!c)
        return -ENOTCONN;
    PGresult *r = NULL;
    struct params none = {0};
    int rc = pg_exec(
        s, c, "SELECT pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on'",
        &none, &r, NULL, "write check");
    if (!rc && PQntuples(r) == 1 && strcmp(pg_val(r, 0, 0), "t") == 0) {
        snprintf(why, whylen,
                 "the database server is read-only (a standby, or "
                 "default_transaction_read_only)");
        rc = -EROFS;
    }
    PQclear(r);
    pg_pool_put(s, c);
    return rc;
}

/* Runs a SELECT and hands the whole result back (the caller walks it without a connection held,
 * so callbacks may call into the store). */
int pg_select_once(struct pg_store *s, struct pg_conn *c, const char *sql, struct params *p,
                   PGresult **out, const char *what)
{
    return pg_exec(s, c, sql, p, out, NULL, what);
}

int pg_changed_once(struct pg_store *s, struct pg_conn *c, const char *sql, struct params *p,
                    unsigned long *n, const char *what)
{
    return pg_exec(s, c, sql, p, NULL, n, what);
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
    .webhook_insert = pg_webhook_insert,
    .webhook_list = pg_webhook_list,
    .webhook_get = pg_webhook_get,
    .webhook_delete = pg_webhook_delete,
    .webhook_deliveries = pg_webhook_deliveries,
    .webhook_delivery_get = pg_webhook_delivery_get,
    .webhook_attempts = pg_webhook_attempts,
    .webhook_claim = pg_webhook_claim,
    .webhook_record = pg_webhook_record,
    .run_insert = pg_run_insert,
    .run_insert_capped = pg_run_insert_capped,
    .runs_count_queued = pg_runs_count_queued,
    .runs_count_by_status = pg_runs_count_by_status,
    .run_get = pg_run_get,
    .run_list = pg_run_list,
    .run_update = pg_run_update,
    .run_progress = pg_run_progress,
    .run_step = pg_run_step,
    .run_finish = pg_run_finish,
    .runs_in_state = pg_runs_in_state,
    .run_claim = pg_run_claim,
    .run_claim_start = pg_run_claim_start,
    .run_renew = pg_run_renew,
    .runs_lease_expired = pg_runs_lease_expired,
    .run_claim_next = pg_run_claim_next,
    .listen = pg_listen,
    .notify_cancel = pg_notify_cancel,
    .purge_logs = pg_purge_logs,
    .run_outputs_put = pg_run_outputs_put,
    .run_outputs_list = pg_run_outputs_list,
    .run_output_get = pg_run_output_get,
    .event_append = pg_event_append,
    .events_list = pg_events_list,
    .idem_begin = pg_idem_begin,
    .idem_complete = pg_idem_complete,
    .idem_abandon = pg_idem_abandon,
    .idem_expire = pg_idem_expire,
    .idem_recover = pg_idem_recover,
    .writable = pg_writable,
    .ledger_totals = pg_ledger_totals,
    .node_put = pg_node_put,
    .node_url = pg_node_url,
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
