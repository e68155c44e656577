/*
 * sqlite.c - the embedded store: one SQLite file in WAL mode.
 *
 * One writer connection and a few reader connections, each serialised by its own mutex. SQLite
 * allows one writer at a time anyway, and a single writer makes every "check then write" (a
 * reservation against the balance) trivially atomic inside BEGIN IMMEDIATE. In WAL mode a reader
 * sees the last committed state without waiting for the writer, so a long poll, an SSE scan or a
 * key lookup never queues behind a worker's fsync. Every statement is prepared once per
 * connection and kept (the cache is keyed by the SQL text's address: every statement is a
 * literal). synchronous=FULL: a committed ledger entry survives a power cut.
 *
 * This file holds the connections, the statement helpers, open, health and the ops table; the
 * operations are in sqlite_orgs.c, sqlite_runs.c and sqlite_idem.c (sqlite_store.h).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>
#include <sys/statvfs.h>

#include "common/cleanup.h"
#include "common/clock.h"
#include "common/log.h"
#include "store/migrations.h"
#include "store/sqlite_store.h"
#include "store/store.h"

/* Round robin: a reader waits only behind another reader of the same connection. */
struct sq_conn *sq_pick_reader(struct sqlite_store *s)
{
    return &s->readers[atomic_fetch_add(&s->next_reader, 1) % NREADERS];
}

/* The writer's write failed for the storage: remembered until a write succeeds. A constraint,
 * a busy lock or a statement's own error says nothing of the storage. */
static void write_failed(struct sq_conn *s, int rc, int err, const char *what)
{
    switch (rc & 0xff) {
    case SQLITE_FULL:
    case SQLITE_READONLY:
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
        break;
    default:
        return;
    }
    if (!s->writer)
        return;
    pthread_mutex_lock(&s->state_lock);
    if (!s->write_err)
        s->write_failed_at_ms = eph_clock_real_ms();
    s->write_err = err;
    snprintf(s->write_why, sizeof(s->write_why), "%s: %s", what, sqlite3_errmsg(s->db));
    pthread_mutex_unlock(&s->state_lock);
}

/* Free space that a failed store needs before it counts as writable again: a small write can
 * succeed on a full disk (into the pages a failed write left in the WAL), the next run's not. */
#define WRITE_ROOM_BYTES (1u << 20)

/* Bytes free for the database's file system, or UINT64_MAX when it cannot be told. */
static uint64_t room(struct sq_conn *s)
{
    struct statvfs fs;
    if (!s->file || !*s->file || statvfs(s->file, &fs) != 0)
        return UINT64_MAX;
    return (uint64_t)fs.f_bavail * fs.f_frsize;
}

/* The writer's transaction (or statement, outside one) changed rows and reached the disk. */
static void write_done(struct sq_conn *s, int64_t changes_before)
{
    if (!s->writer || sqlite3_total_changes64(s->db) <= changes_before)
        return;
    pthread_mutex_lock(&s->state_lock);
    bool failed = s->write_err != 0;
    pthread_mutex_unlock(&s->state_lock);
    if (failed && room(s) >= WRITE_ROOM_BYTES) {
        pthread_mutex_lock(&s->state_lock);
        s->write_err = 0;
        pthread_mutex_unlock(&s->state_lock);
    }
}

/* Maps a SQLite result to a negative errno, logging the database's message. */
static int db_errno(struct sq_conn *s, int rc, const char *what)
{
    int ext = sqlite3_extended_errcode(s->db);
    switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_DONE:
    case SQLITE_ROW:
        return 0;
    case SQLITE_CONSTRAINT:
        return -EEXIST;
    case SQLITE_FULL:
        EPH_ERROR("store", "%s: database or disk is full", what);
        return -ENOSPC;
    case SQLITE_READONLY:
        EPH_ERROR("store", "%s: database is read-only", what);
        return -EROFS;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        EPH_ERROR("store", "%s: database is busy", what);
        return -EBUSY;
    default:
        EPH_ERROR("store", "%s: %s (%d)", what, sqlite3_errmsg(s->db), ext);
        return -EIO;
    }
}

int sq_db_err(struct sq_conn *s, int rc, const char *what)
{
    int e = db_errno(s, rc, what);
    write_failed(s, rc, e, what);
    return e;
}

static int sq_exec(struct sq_conn *s, const char *sql, const char *what)
{
    char *msg = NULL;
    int rc = sqlite3_exec(s->db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
        EPH_ERROR("store", "%s: %s", what, msg ? msg : sqlite3_errstr(rc));
        sqlite3_free(msg);
        return sq_db_err(s, rc, what);
    }
    return 0;
}

int sq_prepare(struct sq_conn *s, const char *sql, sqlite3_stmt **st)
{
    for (unsigned i = 0; i < s->ncache; i++)
        if (s->cache[i].sql == sql) {
            *st = s->cache[i].st;
            return 0;
        }
    unsigned flags = s->ncache < STMT_CACHE ? SQLITE_PREPARE_PERSISTENT : 0;
    int rc = sqlite3_prepare_v3(s->db, sql, -1, flags, st, NULL);
    if (rc != SQLITE_OK)
        return sq_db_err(s, rc, "prepare");
    if (s->ncache < STMT_CACHE) {
        s->cache[s->ncache].sql = sql;
        s->cache[s->ncache].st = *st;
        s->ncache++;
    } else {
        EPH_WARN("store", "statement cache full: %.60s", sql);
    }
    return 0;
}

/* Gives a statement back: cached statements are reset for their next use, others finalized. */
void sq_done(sqlite3_stmt *st)
{
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
}

/* Steps a statement that returns no rows, then finalizes it. */
int sq_step_done(struct sq_conn *s, sqlite3_stmt *st, const char *what)
{
    int64_t before = sqlite3_total_changes64(s->db);
    int rc = sqlite3_step(st);
    int r = (rc == SQLITE_DONE || rc == SQLITE_ROW) ? 0 : sq_db_err(s, rc, what);
    sq_done(st);
    /* Outside a transaction, a statement that changed rows has committed them. */
    if (!r && sqlite3_get_autocommit(s->db))
        write_done(s, before);
    return r;
}

int sq_begin(struct sq_conn *s)
{
    s->txn_changes_at = sqlite3_total_changes64(s->db);
    return sq_exec(s, "BEGIN IMMEDIATE", "begin");
}

int sq_commit(struct sq_conn *s)
{
    int rc = sq_exec(s, "COMMIT", "commit");
    if (!rc)
        write_done(s, s->txn_changes_at);
    return rc;
}

void sq_rollback(struct sq_conn *s)
{
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

void sq_bind_text(sqlite3_stmt *st, int i, const char *v)
{
    if (v)
        sqlite3_bind_text(st, i, v, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, i);
}

void sq_bind_json(sqlite3_stmt *st, int i, const json_t *v)
{
    if (!v) {
        sqlite3_bind_null(st, i);
        return;
    }
    char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (text)
        sqlite3_bind_text(st, i, text, -1, free);
    else
        sqlite3_bind_null(st, i);
}

void sq_bind_ms(sqlite3_stmt *st, int i, int64_t ms)
{
    if (ms)
        sqlite3_bind_int64(st, i, ms);
    else
        sqlite3_bind_null(st, i);
}

char *sq_col_strdup(sqlite3_stmt *st, int i)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    return t ? strdup((const char *)t) : NULL;
}

int sq_col_dup(sqlite3_stmt *st, int i, char **out)
{
    *out = sq_col_strdup(st, i);
    return !*out && sqlite3_column_type(st, i) != SQLITE_NULL ? -ENOMEM : 0;
}

json_t *sq_col_json(sqlite3_stmt *st, int i)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    if (!t)
        return NULL;
    return json_loads((const char *)t, JSON_DECODE_ANY, NULL);
}

static int mg_recorded(void *db, int version)
{
    struct sq_conn *s = db;
    sqlite3_stmt *st;
    int rc = sq_prepare(s, "SELECT 1 FROM schema_migrations WHERE version = ?", &st);
    if (rc)
        return rc;
    sqlite3_bind_int(st, 1, version);
    int r = sqlite3_step(st);
    rc = r == SQLITE_ROW ? 1 : r == SQLITE_DONE ? 0 : sq_db_err(s, r, "migration check");
    sq_done(st);
    return rc;
}

static int mg_apply(void *db, const struct eph_migration *m)
{
    struct sq_conn *s = db;
    sqlite3_stmt *st;
    int rc = sq_exec(s, m->sql, m->name);
    if (!rc && !(rc = sq_prepare(s, "INSERT INTO schema_migrations VALUES (?, ?, ?)", &st))) {
        sqlite3_bind_int(st, 1, m->version);
        sqlite3_bind_text(st, 2, m->name, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, eph_clock_real_ms());
        rc = sq_step_done(s, st, "record migration");
    }
    return rc;
}

static int mg_begin(void *db)
{
    return sq_begin(db);
}

static int mg_commit(void *db)
{
    return sq_commit(db);
}

static void mg_rollback(void *db)
{
    sq_rollback(db);
}

/* Each migration in a transaction of its own. */
static int apply_migrations(struct sq_conn *s)
{
    int rc = sq_exec(s,
                     "CREATE TABLE IF NOT EXISTS schema_migrations ("
                     "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT "
                     "NULL)",
                     "schema_migrations");
    if (rc)
        return rc;
    const struct eph_migrator mg = {.db = s,
                                    .recorded = mg_recorded,
                                    .apply = mg_apply,
                                    .begin = mg_begin,
                                    .commit = mg_commit,
                                    .rollback = mg_rollback};
    return eph_migrations_run(&mg, eph_sqlite_migrations, eph_sqlite_migrations_count);
}

static void conn_close(struct sq_conn *c)
{
    for (unsigned i = 0; i < c->ncache; i++)
        sqlite3_finalize(c->cache[i].st);
    c->ncache = 0;
    sqlite3_close(c->db);
    c->db = NULL;
    free(c->file);
    c->file = NULL;
    pthread_mutex_destroy(&c->state_lock);
    pthread_mutex_destroy(&c->lock);
}

/* Opens one connection; pragmas are the writer's or a reader's. */
static int conn_open(struct sq_conn *c, const char *target, const char *pragmas, char *err,
                     size_t errlen)
{
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->state_lock, NULL);
    /* Each connection is used under its own mutex: SQLite's own per-connection mutex is not
     * needed (NOMUTEX). */
    int rc = sqlite3_open_v2(
        target, &c->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        snprintf(err, errlen, "cannot open database '%s': %s", target,
                 c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc));
        conn_close(c);
        return -EIO;
    }
    sqlite3_busy_timeout(c->db, 5000);
    sqlite3_extended_result_codes(c->db, 1);
    c->file = strdup(target);
    rc = sq_exec(c, pragmas, "pragmas");
    if (rc) {
        snprintf(err, errlen, "cannot prepare database '%s': %s", target,
                 rc == -EROFS ? "read-only" : sqlite3_errmsg(c->db));
        conn_close(c);
    }
    return rc;
}

static void sq_close(struct eph_store *base)
{
    struct sqlite_store *s = S(base);
    if (!s)
        return;
    for (unsigned i = 0; i < NREADERS; i++)
        if (s->readers[i].db)
            conn_close(&s->readers[i]);
    if (s->writer.db)
        conn_close(&s->writer);
    free(s);
}

/* A store being opened: what of it is open is closed on every return, unless taken with
 * eph_steal_ptr. */
static void sq_cleanup_(struct sqlite_store **s)
{
    if (*s) {
        int saved = errno;
        sq_close(&(*s)->base);
        errno = saved;
    }
}
#define SQ_AUTOCLOSE __attribute__((cleanup(sq_cleanup_)))

static int sq_open(const char *target, struct eph_store **out, char *err, size_t errlen)
{
    /* SQLite in WAL mode cannot even read a database it cannot write (the -shm file): say so
     * plainly instead of "unable to open database file". */
    if (access(target, W_OK) != 0 && errno != ENOENT) {
        int e = errno;
        snprintf(err, errlen, "database '%s' is not writable: %s", target,
                 e == EROFS ? "read-only file system" : strerror(e));
        return e == EROFS ? -EROFS : -EACCES;
    }
    SQ_AUTOCLOSE struct sqlite_store *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->base.ops = &eph_store_sqlite_ops;
    s->writer.writer = true;
    int rc = conn_open(&s->writer, target,
                       "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;"
                       "PRAGMA secure_delete=ON;",
                       err, errlen);
    if (rc)
        return rc;
    if ((rc = apply_migrations(&s->writer))) {
        snprintf(err, errlen, "cannot prepare database '%s': %s", target,
                 rc == -EROFS ? "read-only" : sqlite3_errmsg(s->writer.db));
        return rc;
    }
    /* Readers never write (query_only), so a bug cannot bypass the writer's transactions. */
    for (unsigned i = 0; i < NREADERS; i++)
        if ((rc = conn_open(&s->readers[i], target, "PRAGMA query_only=1;", err, errlen)))
            return rc;
    *out = &eph_steal_ptr(&s)->base;
    return 0;
}

static int sq_ping(struct eph_store *base)
{
    struct sq_conn *s = READER(base);
    pthread_mutex_lock(&s->lock);
    int rc = sq_exec(s, "SELECT 1", "ping");
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sq_node_put(struct eph_store *base, const char *node_id, const char *url, int64_t now_ms)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = sq_prepare(s,
                        "INSERT INTO nodes (id, url, updated_at) VALUES (?, ?, ?) ON CONFLICT (id) "
                        "DO UPDATE SET url = excluded.url, updated_at = excluded.updated_at",
                        &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, node_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, url, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 3, now_ms);
        rc = sq_step_done(s, st, "node put");
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sq_node_url(struct eph_store *base, const char *node_id, char *url, size_t len)
{
    struct sq_conn *s = READER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = sq_prepare(s, "SELECT url FROM nodes WHERE id = ?", &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, node_id, -1, SQLITE_TRANSIENT);
        int r = sqlite3_step(st);
        if (r == SQLITE_ROW)
            rc = snprintf(url, len, "%s", sqlite3_column_text(st, 0)) >= (int)len ? -ENAMETOOLONG
                                                                                  : 0;
        else
            rc = r == SQLITE_DONE ? -ENOENT : sq_db_err(s, r, "node url");
        sq_done(st);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* Probes at most this often while writes fail. */
#define WRITE_PROBE_MS 1000

/* The probe, under the writer's lock. */
static void probe(struct sq_conn *s, int64_t now)
{
    s->probed_ms = now;
    sqlite3_stmt *st = NULL;
    int version = -1;
    if (room(s) >= WRITE_ROOM_BYTES &&
        sqlite3_prepare_v2(s->db, "PRAGMA user_version", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        version = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    char sql[64];
    snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", version);
    if (version >= 0 && sqlite3_exec(s->db, sql, NULL, NULL, NULL) == SQLITE_OK) {
        pthread_mutex_lock(&s->state_lock);
        s->write_err = 0;
        pthread_mutex_unlock(&s->state_lock);
    }
}

/* What the last write said; while it failed, one probe a second: WRITE_ROOM_BYTES free on the
 * database's file system, and the database header's user_version written again with its own
 * value (one page, which a checkpoint takes back; a probe that fails leaves nothing behind), so
 * that a store that can write again is seen without waiting for a real write. */
static int sq_writable(struct eph_store *base, char *why, size_t whylen)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->state_lock);
    bool failed = s->write_err != 0;
    pthread_mutex_unlock(&s->state_lock);
    int64_t now = (int64_t)(eph_clock_mono_ns() / 1000000u);
    /* The probe takes the writer when it is free; a busy writer's own write will say. */
    if (failed && pthread_mutex_trylock(&s->lock) == 0) {
        if (now - s->probed_ms >= WRITE_PROBE_MS)
            probe(s, now);
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_lock(&s->state_lock);
    int rc = s->write_err;
    if (rc) {
        char since[32], free_text[64] = "";
        eph_clock_format_iso8601(s->write_failed_at_ms, since, sizeof(since));
        uint64_t left = room(s);
        if (left != UINT64_MAX)
            snprintf(free_text, sizeof(free_text), "; %llu KiB free for the database",
                     (unsigned long long)(left >> 10));
        snprintf(why, whylen, "%s (since %s%s)", s->write_why, since, free_text);
    }
    pthread_mutex_unlock(&s->state_lock);
    return rc;
}

const struct eph_store_ops eph_store_sqlite_ops = {
    .name = "sqlite",
    .open = sq_open,
    .close = sq_close,
    .ping = sq_ping,
    .writable = sq_writable,
    .org_ensure = sq_org_ensure,
    .org_find = sq_org_find,
    .credit_add = sq_credit_add,
    .key_insert = sq_key_insert,
    .key_lookup = sq_key_lookup,
    .balance = sq_balance,
    .key_list = sq_key_list,
    .key_revoke = sq_key_revoke,
    .conn_insert = sq_conn_insert,
    .conn_list = sq_conn_list,
    .conn_get = sq_conn_get,
    .conn_delete = sq_conn_delete,
    .image_insert = sq_image_insert,
    .image_update = sq_image_update,
    .image_get = sq_image_get,
    .image_list = sq_image_list,
    .image_delete = sq_image_delete,
    .webhook_insert = sq_webhook_insert,
    .webhook_list = sq_webhook_list,
    .webhook_get = sq_webhook_get,
    .webhook_delete = sq_webhook_delete,
    .webhook_deliveries = sq_webhook_deliveries,
    .webhook_delivery_get = sq_webhook_delivery_get,
    .webhook_attempts = sq_webhook_attempts,
    .webhook_claim = sq_webhook_claim,
    .webhook_record = sq_webhook_record,
    .run_insert = sq_run_insert,
    .run_insert_capped = sq_run_insert_capped,
    .runs_count_queued = sq_runs_count_queued,
    .runs_count_by_status = sq_runs_count_by_status,
    .run_get = sq_run_get,
    .run_list = sq_run_list,
    .run_update = sq_run_update,
    .run_progress = sq_run_progress,
    .run_step = sq_run_step,
    .run_finish = sq_run_finish,
    .runs_in_state = sq_runs_in_state,
    .run_claim = sq_run_claim,
    .run_claim_start = sq_run_claim_start,
    .run_claim_next = sq_run_claim_next,
    .run_renew = sq_run_renew,
    .runs_lease_expired = sq_runs_lease_expired,
    .purge_logs = sq_purge_logs,
    .run_outputs_put = sq_run_outputs_put,
    .run_outputs_list = sq_run_outputs_list,
    .run_output_get = sq_run_output_get,
    .event_append = sq_event_append,
    .events_list = sq_events_list,
    .idem_begin = sq_idem_begin,
    .idem_complete = sq_idem_complete,
    .idem_abandon = sq_idem_abandon,
    .idem_expire = sq_idem_expire,
    .idem_recover = sq_idem_recover,
    .ledger_totals = sq_ledger_totals,
    .node_put = sq_node_put,
    .node_url = sq_node_url,
};
