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
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>
#include <sys/statvfs.h>

#include "common/cleanup.h"
#include "common/clock.h"
#include "common/id.h"
#include "common/log.h"
#include "store/migrations.h"
#include "store/store.h"

#define STMT_CACHE 64
#define NREADERS 4

struct sq_conn {
    sqlite3 *db;
    pthread_mutex_t lock;
    struct {
        const char *sql;
        sqlite3_stmt *st;
    } cache[STMT_CACHE];
    unsigned ncache;
    /* The writer's: whether the last write reached the disk (readiness, sq_writable). A write
     * that fails for the storage (full, read-only, I/O) sets write_err, with what and since when;
     * a later commit that changed something clears it. Under state_lock, never held across the
     * database, so that readiness does not wait behind a write. */
    bool writer;
    char *file; /* the database's path, for its file system's free space */
    pthread_mutex_t state_lock;
    int write_err;
    char write_why[160];
    int64_t write_failed_at_ms;
    int64_t probed_ms; /* monotonic: the last write probe */
    int64_t txn_changes_at;
};

struct sqlite_store {
    struct eph_store base;
    struct sq_conn writer;
    struct sq_conn readers[NREADERS];
    atomic_uint next_reader;
};

#define S(s) ((struct sqlite_store *)(s))
#define WRITER(b) (&S(b)->writer)
#define READER(b) pick_reader(S(b))

/* Round robin: a reader waits only behind another reader of the same connection. */
static struct sq_conn *pick_reader(struct sqlite_store *s)
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

static int db_err(struct sq_conn *s, int rc, const char *what)
{
    int e = db_errno(s, rc, what);
    write_failed(s, rc, e, what);
    return e;
}

static int exec_sql(struct sq_conn *s, const char *sql, const char *what)
{
    char *msg = NULL;
    int rc = sqlite3_exec(s->db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
        EPH_ERROR("store", "%s: %s", what, msg ? msg : sqlite3_errstr(rc));
        sqlite3_free(msg);
        return db_err(s, rc, what);
    }
    return 0;
}

static int prepare(struct sq_conn *s, const char *sql, sqlite3_stmt **st)
{
    for (unsigned i = 0; i < s->ncache; i++)
        if (s->cache[i].sql == sql) {
            *st = s->cache[i].st;
            return 0;
        }
    unsigned flags = s->ncache < STMT_CACHE ? SQLITE_PREPARE_PERSISTENT : 0;
    int rc = sqlite3_prepare_v3(s->db, sql, -1, flags, st, NULL);
    if (rc != SQLITE_OK)
        return db_err(s, rc, "prepare");
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
static void done(sqlite3_stmt *st)
{
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
}

/* Steps a statement that returns no rows, then finalizes it. */
static int step_done(struct sq_conn *s, sqlite3_stmt *st, const char *what)
{
    int64_t before = sqlite3_total_changes64(s->db);
    int rc = sqlite3_step(st);
    int r = (rc == SQLITE_DONE || rc == SQLITE_ROW) ? 0 : db_err(s, rc, what);
    done(st);
    /* Outside a transaction, a statement that changed rows has committed them. */
    if (!r && sqlite3_get_autocommit(s->db))
        write_done(s, before);
    return r;
}

static int begin(struct sq_conn *s)
{
    s->txn_changes_at = sqlite3_total_changes64(s->db);
    return exec_sql(s, "BEGIN IMMEDIATE", "begin");
}

static int commit(struct sq_conn *s)
{
    int rc = exec_sql(s, "COMMIT", "commit");
    if (!rc)
        write_done(s, s->txn_changes_at);
    return rc;
}

static void rollback(struct sq_conn *s)
{
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

static void bind_text_or_null(sqlite3_stmt *st, int i, const char *v)
{
    if (v)
        sqlite3_bind_text(st, i, v, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, i);
}

static void bind_json_or_null(sqlite3_stmt *st, int i, const json_t *v)
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

static void bind_ms_or_null(sqlite3_stmt *st, int i, int64_t ms)
{
    if (ms)
        sqlite3_bind_int64(st, i, ms);
    else
        sqlite3_bind_null(st, i);
}

static char *col_strdup(sqlite3_stmt *st, int i)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    return t ? strdup((const char *)t) : NULL;
}

static json_t *col_json(sqlite3_stmt *st, int i)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    if (!t)
        return NULL;
    return json_loads((const char *)t, JSON_DECODE_ANY, NULL);
}

static int apply_migrations(struct sq_conn *s)
{
    int rc = exec_sql(s,
                      "CREATE TABLE IF NOT EXISTS schema_migrations ("
                      "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT "
                      "NULL)",
                      "schema_migrations");
    if (rc)
        return rc;
    for (unsigned i = 0; i < eph_sqlite_migrations_count; i++) {
        const struct eph_migration *m = &eph_sqlite_migrations[i];
        sqlite3_stmt *st;
        if ((rc = prepare(s, "SELECT 1 FROM schema_migrations WHERE version = ?", &st)))
            return rc;
        sqlite3_bind_int(st, 1, m->version);
        int have = sqlite3_step(st) == SQLITE_ROW;
        done(st);
        if (have)
            continue;
        if ((rc = begin(s)))
            return rc;
        if ((rc = exec_sql(s, m->sql, m->name))) {
            rollback(s);
            return rc;
        }
        if ((rc = prepare(s, "INSERT INTO schema_migrations VALUES (?, ?, ?)", &st))) {
            rollback(s);
            return rc;
        }
        sqlite3_bind_int(st, 1, m->version);
        sqlite3_bind_text(st, 2, m->name, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, eph_clock_real_ms());
        if ((rc = step_done(s, st, "record migration")) || (rc = commit(s))) {
            rollback(s);
            return rc;
        }
        EPH_INFO("store", "applied migration %d (%s)", m->version, m->name);
    }
    return 0;
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
    rc = exec_sql(c, pragmas, "pragmas");
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
    int rc = exec_sql(s, "SELECT 1", "ping");
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

/* Appends a ledger entry and moves the org's running totals in the same transaction (the caller's).
 * balance = credits - charges, reserved = reserves - charges - releases. A credit that would take
 * the balance past what 64 bits hold is refused (-EOVERFLOW), so the totals always fit. */
static int insert_ledger(struct sq_conn *s, const char *org_id, const char *run_id,
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
    sqlite3_stmt *st;
    int rc = prepare(s,
                     "UPDATE orgs SET balance_micros = balance_micros + ?1, "
                     "reserved_micros = reserved_micros + ?2 WHERE id = ?3 AND "
                     "(?1 <= 0 OR balance_micros <= 9223372036854775807 - ?1)",
                     &st);
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, dbal);
    sqlite3_bind_int64(st, 2, dres);
    sqlite3_bind_text(st, 3, org_id, -1, SQLITE_TRANSIENT);
    if ((rc = step_done(s, st, "balance update")))
        return rc;
    if (sqlite3_changes(s->db) == 0) {
        /* No row: either no such org, or the credit would overflow. */
        if ((rc = prepare(s, "SELECT 1 FROM orgs WHERE id = ?", &st)))
            return rc;
        sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
        int have = sqlite3_step(st) == SQLITE_ROW;
        done(st);
        return have ? -EOVERFLOW : -ENOENT;
    }
    if ((rc = prepare(s,
                      "INSERT INTO ledger (org_id, run_id, kind, micros, created_at) "
                      "VALUES (?, ?, ?, ?, ?)",
                      &st)))
        return rc;
    sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
    bind_text_or_null(st, 2, run_id);
    sqlite3_bind_text(st, 3, kind, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, micros);
    sqlite3_bind_int64(st, 5, now);
    return step_done(s, st, "ledger insert");
}

static int org_find_locked(struct sq_conn *s, const char *name, char *org_id, size_t idlen)
{
    sqlite3_stmt *st;
    int rc = prepare(s, "SELECT id FROM orgs WHERE name = ?", &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        snprintf(org_id, idlen, "%s", sqlite3_column_text(st, 0));
        rc = 0;
    } else {
        rc = rc == SQLITE_DONE ? -ENOENT : db_err(s, rc, "org find");
    }
    done(st);
    return rc;
}

static int sq_org_find(struct eph_store *base, const char *name, char *org_id, size_t idlen)
{
    struct sq_conn *s = READER(base);
    pthread_mutex_lock(&s->lock);
    int rc = org_find_locked(s, name, org_id, idlen);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sq_org_ensure(struct eph_store *base, const char *name, int64_t initial_credit,
                         char *org_id, size_t idlen, bool *created)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    *created = false;
    int rc = begin(s);
    if (rc)
        goto out;
    rc = org_find_locked(s, name, org_id, idlen);
    if (rc != -ENOENT) {
        if (rc)
            rollback(s);
        else
            rc = commit(s);
        goto out;
    }
    char id[48];
    if ((rc = eph_id_hex("org_", 12, id, sizeof(id))))
        goto fail;
    sqlite3_stmt *st;
    if ((rc = prepare(s, "INSERT INTO orgs (id, name, created_at) VALUES (?, ?, ?)", &st)))
        goto fail;
    int64_t now = eph_clock_real_ms();
    sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 3, now);
    if ((rc = step_done(s, st, "org insert")))
        goto fail;
    if (initial_credit > 0 && (rc = insert_ledger(s, id, NULL, "credit", initial_credit, now)))
        goto fail;
    if ((rc = commit(s)))
        goto fail;
    snprintf(org_id, idlen, "%s", id);
    *created = true;
    goto out;
fail:
    rollback(s);
out:
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sq_credit_add(struct eph_store *base, const char *org_id, int64_t micros)
{
    struct sq_conn *s = WRITER(base);
    if (micros <= 0)
        return -EINVAL;
    pthread_mutex_lock(&s->lock);
    int rc = begin(s);
    if (!rc) {
        rc = insert_ledger(s, org_id, NULL, "credit", micros, eph_clock_real_ms());
        if (!rc)
            rc = commit(s);
        if (rc)
            rollback(s);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sq_key_insert(struct eph_store *base, const char *org_id, const char *key_hash,
                         const char *role, const char *prefix, char *key_id, size_t idlen)
{
    struct sq_conn *s = WRITER(base);
    char id[48];
    int rc = eph_id_hex("key_", 12, id, sizeof(id));
    if (rc)
        return rc;
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    rc = prepare(s,
                 "INSERT INTO api_keys (id, org_id, key_hash, role, created_at, prefix) "
                 "VALUES (?, ?, ?, ?, ?, ?)",
                 &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, org_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 3, key_hash, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 4, role, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 5, eph_clock_real_ms());
        bind_text_or_null(st, 6, prefix);
        rc = step_done(s, st, "key insert");
    }
    pthread_mutex_unlock(&s->lock);
    if (!rc && key_id)
        snprintf(key_id, idlen, "%s", id);
    return rc;
}

static int sq_key_lookup(struct eph_store *base, const char *key_hash, char *org_id, size_t idlen,
                         char *role, size_t rolelen)
{
    struct sq_conn *s = READER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    /* The lookup is by the hash of the key, so its timing reveals nothing about the key. */
    int rc = prepare(
        s, "SELECT org_id, role FROM api_keys WHERE key_hash = ? AND revoked_at IS NULL", &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, key_hash, -1, SQLITE_TRANSIENT);
        int r = sqlite3_step(st);
        if (r == SQLITE_ROW) {
            snprintf(org_id, idlen, "%s", sqlite3_column_text(st, 0));
            snprintf(role, rolelen, "%s", sqlite3_column_text(st, 1));
        } else {
            rc = r == SQLITE_DONE ? -ENOENT : db_err(s, r, "key lookup");
        }
        done(st);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sq_key_list(struct eph_store *base, const char *org_id, eph_key_cb cb, void *ctx)
{
    struct sq_conn *s = READER(base);
    struct eph_key_info *rows = NULL;
    size_t n = 0, cap = 0;
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = prepare(s,
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
            rc = db_err(s, r, "key list");
        done(st);
    }
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < n && !rc; i++)
        rc = cb(&rows[i], ctx);
    free(rows);
    return rc;
}

static int sq_key_revoke(struct eph_store *base, const char *org_id, const char *key_id,
                         int64_t now_ms)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = prepare(s,
                     "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND org_id = ? AND "
                     "revoked_at IS NULL",
                     &st);
    if (!rc) {
        sqlite3_bind_int64(st, 1, now_ms);
        sqlite3_bind_text(st, 2, key_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 3, org_id, -1, SQLITE_TRANSIENT);
        rc = step_done(s, st, "key revoke");
        if (!rc && sqlite3_changes(s->db) == 0)
            rc = -ENOENT;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sq_conn_insert(struct eph_store *base, const char *org_id,
                          const struct eph_connection *c, char *conn_id, size_t idlen)
{
    struct sq_conn *s = WRITER(base);
    char id[48];
    int rc = eph_id_hex("conn_", 12, id, sizeof(id));
    if (rc)
        return rc;
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    rc = prepare(s,
                 "INSERT INTO connections (id, org_id, name, base_url, methods, path_prefixes, "
                 "header_names, sealed_headers, created_at, query_names) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                 &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, org_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 3, c->name, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 4, c->base_url, -1, SQLITE_TRANSIENT);
        bind_json_or_null(st, 5, c->methods);
        bind_json_or_null(st, 6, c->path_prefixes);
        bind_json_or_null(st, 7, c->header_names);
        sqlite3_bind_blob(st, 8, c->sealed, (int)c->sealed_len, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 9, c->created_at_ms);
        if (c->query_names)
            bind_json_or_null(st, 10, c->query_names);
        else
            sqlite3_bind_text(st, 10, "[]", -1, SQLITE_STATIC);
        rc = step_done(s, st, "connection insert");
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
    c->base_url = col_strdup(st, 2);
    c->methods = col_json(st, 3);
    c->path_prefixes = col_json(st, 4);
    c->header_names = col_json(st, 5);
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
    c->query_names = col_json(st, 8);
    if (!c->base_url || !c->methods || !c->path_prefixes || !c->header_names || !c->query_names ||
        (n > 0 && !c->sealed)) {
        eph_connection_release(c);
        return -ENOMEM;
    }
    return 0;
}

static int sq_conn_list(struct eph_store *base, const char *org_id, eph_conn_cb cb, void *ctx)
{
    struct sq_conn *s = READER(base);
    struct eph_connection *rows = NULL;
    size_t n = 0, cap = 0;
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc =
        prepare(s, "SELECT " CONN_COLUMNS " FROM connections WHERE org_id = ? ORDER BY name", &st);
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
            rc = db_err(s, r, "connection list");
        done(st);
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

static int sq_conn_get(struct eph_store *base, const char *org_id, const char *name,
                       struct eph_connection *out)
{
    struct sq_conn *s = READER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc =
        prepare(s, "SELECT " CONN_COLUMNS " FROM connections WHERE org_id = ? AND name = ?", &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, name, -1, SQLITE_TRANSIENT);
        int r = sqlite3_step(st);
        if (r == SQLITE_ROW)
            rc = row_to_conn(st, out);
        else
            rc = r == SQLITE_DONE ? -ENOENT : db_err(s, r, "connection get");
        done(st);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sq_conn_delete(struct eph_store *base, const char *org_id, const char *name_or_id)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc =
        prepare(s, "DELETE FROM connections WHERE org_id = ?1 AND (name = ?2 OR id = ?2)", &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, name_or_id, -1, SQLITE_TRANSIENT);
        rc = step_done(s, st, "connection delete");
        if (!rc && sqlite3_changes(s->db) == 0)
            rc = -ENOENT;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* ---- images ---- */

#define IMAGE_COLUMNS                                                                              \
    "org_id, name, status, digest, size_bytes, recipe, created_at, error, log_path"
/* The images an org sees: its own, and the operator's ('') of a name it has none of. */
#define IMAGE_VISIBLE                                                                              \
    "(org_id = ?1 OR (org_id = '' AND name NOT IN (SELECT name FROM images WHERE org_id = ?1)))"

static int row_to_image(sqlite3_stmt *st, struct eph_image_rec *r)
{
    memset(r, 0, sizeof(*r));
    snprintf(r->org_id, sizeof(r->org_id), "%s", sqlite3_column_text(st, 0));
    snprintf(r->name, sizeof(r->name), "%s", sqlite3_column_text(st, 1));
    snprintf(r->status, sizeof(r->status), "%s", sqlite3_column_text(st, 2));
    snprintf(r->digest, sizeof(r->digest), "%s", sqlite3_column_text(st, 3));
    r->size_bytes = sqlite3_column_int64(st, 4);
    r->recipe = col_json(st, 5);
    r->created_at_ms = sqlite3_column_int64(st, 6);
    r->error = col_strdup(st, 7);
    r->log_path = col_strdup(st, 8);
    if (!r->recipe) {
        eph_image_rec_release(r);
        return -ENOMEM;
    }
    return 0;
}

static void bind_image(sqlite3_stmt *st, const struct eph_image_rec *r)
{
    sqlite3_bind_text(st, 1, r->org_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, r->name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, r->status, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 4, r->digest, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 5, r->size_bytes);
    bind_json_or_null(st, 6, r->recipe);
    sqlite3_bind_int64(st, 7, r->created_at_ms);
    if (r->error)
        sqlite3_bind_text(st, 8, r->error, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, 8);
    if (r->log_path)
        sqlite3_bind_text(st, 9, r->log_path, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, 9);
}

static int sq_image_write(struct eph_store *base, const struct eph_image_rec *r, bool insert)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = prepare(s,
                     insert ? "INSERT INTO images (" IMAGE_COLUMNS
                              ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
                            : "UPDATE images SET status = ?3, digest = ?4, size_bytes = ?5, "
                              "recipe = ?6, error = ?8, log_path = ?9 "
                              "WHERE org_id = ?1 AND name = ?2 AND created_at = ?7",
                     &st);
    if (!rc) {
        bind_image(st, r);
        rc = step_done(s, st, insert ? "image insert" : "image update");
        if (!rc && sqlite3_changes(s->db) == 0)
            rc = -ENOENT;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sq_image_insert(struct eph_store *base, const struct eph_image_rec *r)
{
    return sq_image_write(base, r, true);
}

static int sq_image_update(struct eph_store *base, const struct eph_image_rec *r)
{
    return sq_image_write(base, r, false);
}

static int sq_image_get(struct eph_store *base, const char *org_id, const char *name,
                        struct eph_image_rec *out)
{
    struct sq_conn *s = READER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = prepare(s,
                     "SELECT " IMAGE_COLUMNS " FROM images WHERE name = ?2 AND "
                     "(org_id = ?1 OR org_id = '') ORDER BY org_id = '' LIMIT 1",
                     &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, name, -1, SQLITE_TRANSIENT);
        int r = sqlite3_step(st);
        rc = r == SQLITE_ROW    ? row_to_image(st, out)
             : r == SQLITE_DONE ? -ENOENT
                                : db_err(s, r, "image get");
        done(st);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sq_image_list(struct eph_store *base, const char *org_id, eph_image_cb cb, void *ctx)
{
    struct sq_conn *s = READER(base);
    struct eph_image_rec *rows = NULL;
    size_t n = 0, cap = 0;
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = prepare(
        s, "SELECT " IMAGE_COLUMNS " FROM images WHERE " IMAGE_VISIBLE " ORDER BY name", &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
        int r;
        while ((r = sqlite3_step(st)) == SQLITE_ROW) {
            if (n == cap) {
                size_t ncap = cap ? cap * 2 : 16;
                struct eph_image_rec *p = realloc(rows, ncap * sizeof(*rows));
                if (!p) {
                    rc = -ENOMEM;
                    break;
                }
                rows = p;
                cap = ncap;
            }
            if ((rc = row_to_image(st, &rows[n])))
                break;
            n++;
        }
        if (!rc && r != SQLITE_DONE)
            rc = db_err(s, r, "image list");
        done(st);
    }
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < n; i++) {
        if (!rc)
            rc = cb(&rows[i], ctx);
        eph_image_rec_release(&rows[i]);
    }
    free(rows);
    return rc;
}

static int sq_image_delete(struct eph_store *base, const char *org_id, const char *name)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = begin(s);
    if (!rc)
        rc = prepare(s,
                     "SELECT 1 FROM runs WHERE image = ?2 AND (?1 = '' OR org_id = ?1) AND "
                     "status IN ('queued', 'starting', 'running') LIMIT 1",
                     &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, name, -1, SQLITE_TRANSIENT);
        int r = sqlite3_step(st);
        rc = r == SQLITE_ROW ? -EBUSY : r == SQLITE_DONE ? 0 : db_err(s, r, "image in use");
        done(st);
    }
    if (!rc && !(rc = prepare(s, "DELETE FROM images WHERE org_id = ?1 AND name = ?2", &st))) {
        sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, name, -1, SQLITE_TRANSIENT);
        rc = step_done(s, st, "image delete");
        if (!rc && sqlite3_changes(s->db) == 0)
            rc = -ENOENT;
    }
    if (!rc)
        rc = commit(s);
    if (rc)
        rollback(s);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int count_queued_locked(struct sq_conn *s, const char *org_id, unsigned *out)
{
    sqlite3_stmt *st;
    int rc = prepare(s, "SELECT COUNT(*) FROM runs WHERE org_id = ? AND status = 'queued'", &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
    int r = sqlite3_step(st);
    if (r == SQLITE_ROW)
        *out = (unsigned)sqlite3_column_int64(st, 0);
    else
        rc = db_err(s, r, "count queued");
    done(st);
    return rc;
}

static int sq_runs_count_queued(struct eph_store *base, const char *org_id, unsigned *out)
{
    struct sq_conn *s = READER(base);
    pthread_mutex_lock(&s->lock);
    int rc = count_queued_locked(s, org_id, out);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sq_runs_count_by_status(struct eph_store *base, eph_status_count_cb cb, void *ctx)
{
    struct sq_conn *s = READER(base);
    struct {
        char status[24];
        uint64_t n;
    } rows[16];
    memset(rows, 0, sizeof(rows));
    size_t n = 0;
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = prepare(s, "SELECT status, COUNT(*) FROM runs GROUP BY status ORDER BY status", &st);
    if (!rc) {
        int r;
        while ((r = sqlite3_step(st)) == SQLITE_ROW && n < sizeof(rows) / sizeof(rows[0])) {
            snprintf(rows[n].status, sizeof(rows[n].status), "%s", sqlite3_column_text(st, 0));
            rows[n].n = (uint64_t)sqlite3_column_int64(st, 1);
            n++;
        }
        if (r != SQLITE_DONE && r != SQLITE_ROW)
            rc = db_err(s, r, "count by status");
        done(st);
    }
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < n && !rc; i++)
        rc = cb(rows[i].status, rows[i].n, ctx);
    return rc;
}

static int ledger_totals_locked(struct sq_conn *s, const char *org_id, int64_t *credits,
                                int64_t *reserves, int64_t *charges, int64_t *releases)
{
    sqlite3_stmt *st;
    int rc = prepare(s,
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
        rc = db_err(s, rc, "ledger totals");
    }
    done(st);
    return rc;
}

static int balance_locked(struct sq_conn *s, const char *org_id, struct eph_balance *out)
{
    sqlite3_stmt *st;
    int rc = prepare(s, "SELECT balance_micros, reserved_micros FROM orgs WHERE id = ?", &st);
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
        rc = rc == SQLITE_DONE ? -ENOENT : db_err(s, rc, "balance");
    }
    done(st);
    return rc;
}

static int sq_balance(struct eph_store *base, const char *org_id, struct eph_balance *out)
{
    struct sq_conn *s = READER(base);
    pthread_mutex_lock(&s->lock);
    int rc = balance_locked(s, org_id, out);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sq_ledger_totals(struct eph_store *base, const char *org_id, int64_t *credits,
                            int64_t *reserves, int64_t *charges, int64_t *releases)
{
    struct sq_conn *s = READER(base);
    pthread_mutex_lock(&s->lock);
    int rc = ledger_totals_locked(s, org_id, credits, reserves, charges, releases);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int event_insert_locked(struct sq_conn *s, const char *run_id, const struct eph_event *e)
{
    sqlite3_stmt *st;
    int rc = prepare(s,
                     "INSERT INTO events (run_id, seq, t_ms, at_ms, source, type, message, data, "
                     "wire) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                     &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, run_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)e->seq);
    sqlite3_bind_int64(st, 3, e->t_ms);
    sqlite3_bind_int64(st, 4, e->at_ms);
    sqlite3_bind_text(st, 5, e->source, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 6, e->type, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 7, e->message ? e->message : "", -1, SQLITE_TRANSIENT);
    /* With its wire text, data is in it already: not stored twice (store.h). */
    if (e->data && !e->wire)
        bind_json_or_null(st, 8, e->data);
    else
        sqlite3_bind_text(st, 8, "{}", -1, SQLITE_STATIC);
    if (e->wire)
        sqlite3_bind_text(st, 9, e->wire, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, 9);
    return step_done(s, st, "event insert");
}

static int sq_run_insert_capped(struct eph_store *base, const struct eph_run *r,
                                const struct eph_event *first, unsigned max_queued)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    int rc = begin(s);
    if (rc)
        goto out;
    if (max_queued) {
        unsigned queued = 0;
        if ((rc = count_queued_locked(s, r->org_id, &queued)))
            goto fail;
        if (queued >= max_queued) {
            rc = -EAGAIN;
            goto fail;
        }
    }
    struct eph_balance b;
    if ((rc = balance_locked(s, r->org_id, &b)))
        goto fail;
    if (b.available_micros < r->cost.reserved_micros) {
        rc = -EDQUOT;
        goto fail;
    }
    sqlite3_stmt *st;
    rc = prepare(s,
                 "INSERT INTO runs (id, org_id, status, model, prompt, files, connections, "
                 "metadata, shell, web, zdr, timeout_seconds, created_at, reserved_micros, "
                 "node_id, lease_expires_at, web_allow, replay_of, image, image_digest) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                 &st);
    if (rc)
        goto fail;
    sqlite3_bind_text(st, 1, r->id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, r->org_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, eph_run_status_name(r->status), -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, r->model, -1, SQLITE_TRANSIENT);
    bind_text_or_null(st, 5, r->prompt);
    bind_json_or_null(st, 6, r->files);
    if (r->connections)
        bind_json_or_null(st, 7, r->connections);
    else
        sqlite3_bind_text(st, 7, "[]", -1, SQLITE_STATIC);
    if (r->metadata)
        bind_json_or_null(st, 8, r->metadata);
    else
        sqlite3_bind_text(st, 8, "{}", -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 9, r->shell);
    sqlite3_bind_int(st, 10, r->web);
    sqlite3_bind_int(st, 11, r->zdr);
    sqlite3_bind_int(st, 12, (int)r->timeout_seconds);
    sqlite3_bind_int64(st, 13, r->created_at_ms);
    sqlite3_bind_int64(st, 14, r->cost.reserved_micros);
    bind_text_or_null(st, 15, r->node_id[0] ? r->node_id : NULL);
    bind_ms_or_null(st, 16, r->lease_expires_at_ms);
    bind_json_or_null(st, 17, r->web_allow);
    bind_text_or_null(st, 18, r->replay_of);
    sqlite3_bind_text(st, 19, r->image[0] ? r->image : "default", -1, SQLITE_TRANSIENT);
    bind_text_or_null(st, 20, r->image_digest[0] ? r->image_digest : NULL);
    if ((rc = step_done(s, st, "run insert")))
        goto fail;
    if ((rc = insert_ledger(s, r->org_id, r->id, "reserve", r->cost.reserved_micros,
                            r->created_at_ms)))
        goto fail;
    if (first && (rc = event_insert_locked(s, r->id, first)))
        goto fail;
    rc = commit(s);
    if (rc)
        goto fail;
    goto out;
fail:
    rollback(s);
out:
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sq_run_insert(struct eph_store *base, const struct eph_run *r,
                         const struct eph_event *first)
{
    return sq_run_insert_capped(base, r, first, 0);
}

#define RUN_COLUMNS                                                                                \
    "id, org_id, status, model, prompt, files, connections, metadata, shell, web, zdr, "           \
    "timeout_seconds, created_at, started_at, finished_at, result, error_type, error_code, "       \
    "error_message, model_calls, input_tokens, output_tokens, shell_commands, web_requests, "      \
    "connection_requests, reserved_micros, model_micros, web_micros, compute_micros, "             \
    "charged_micros, released_micros, sandbox_backend, vcpus, memory_mib, log_expires_at, "        \
    "log_purged, node_id, lease_expires_at, web_allow, replay_of, divergences, image, "            \
    "image_digest"

static void row_to_run(sqlite3_stmt *st, struct eph_run *r)
{
    eph_run_init(r);
    snprintf(r->id, sizeof(r->id), "%s", sqlite3_column_text(st, 0));
    snprintf(r->org_id, sizeof(r->org_id), "%s", sqlite3_column_text(st, 1));
    eph_run_status_parse((const char *)sqlite3_column_text(st, 2), &r->status);
    r->model = col_strdup(st, 3);
    r->prompt = col_strdup(st, 4);
    r->files = col_json(st, 5);
    r->connections = col_json(st, 6);
    r->metadata = col_json(st, 7);
    r->shell = sqlite3_column_int(st, 8);
    r->web = sqlite3_column_int(st, 9);
    r->zdr = sqlite3_column_int(st, 10);
    r->timeout_seconds = (unsigned)sqlite3_column_int(st, 11);
    r->created_at_ms = sqlite3_column_int64(st, 12);
    r->started_at_ms = sqlite3_column_int64(st, 13);
    r->finished_at_ms = sqlite3_column_int64(st, 14);
    r->result = col_strdup(st, 15);
    r->error_type = col_strdup(st, 16);
    r->error_code = col_strdup(st, 17);
    r->error_message = col_strdup(st, 18);
    r->usage.model_calls = (uint64_t)sqlite3_column_int64(st, 19);
    r->usage.input_tokens = (uint64_t)sqlite3_column_int64(st, 20);
    r->usage.output_tokens = (uint64_t)sqlite3_column_int64(st, 21);
    r->usage.shell_commands = (uint64_t)sqlite3_column_int64(st, 22);
    r->usage.web_requests = (uint64_t)sqlite3_column_int64(st, 23);
    r->usage.connection_requests = (uint64_t)sqlite3_column_int64(st, 24);
    r->cost.reserved_micros = sqlite3_column_int64(st, 25);
    r->cost.model_micros = sqlite3_column_int64(st, 26);
    r->cost.web_micros = sqlite3_column_int64(st, 27);
    r->cost.compute_micros = sqlite3_column_int64(st, 28);
    r->cost.charged_micros = sqlite3_column_int64(st, 29);
    r->cost.released_micros = sqlite3_column_int64(st, 30);
    r->sandbox_backend = col_strdup(st, 31);
    r->vcpus = (unsigned)sqlite3_column_int(st, 32);
    r->memory_mib = (unsigned)sqlite3_column_int(st, 33);
    r->log_expires_at_ms = sqlite3_column_int64(st, 34);
    r->log_purged = sqlite3_column_int(st, 35);
    const unsigned char *node = sqlite3_column_text(st, 36);
    snprintf(r->node_id, sizeof(r->node_id), "%s", node ? (const char *)node : "");
    r->lease_expires_at_ms = sqlite3_column_int64(st, 37);
    r->web_allow = col_json(st, 38);
    r->replay_of = col_strdup(st, 39);
    r->divergences = (uint64_t)sqlite3_column_int64(st, 40);
    const unsigned char *image = sqlite3_column_text(st, 41);
    snprintf(r->image, sizeof(r->image), "%s", image ? (const char *)image : "default");
    const unsigned char *digest = sqlite3_column_text(st, 42);
    snprintf(r->image_digest, sizeof(r->image_digest), "%s", digest ? (const char *)digest : "");
}

static int sq_run_get(struct eph_store *base, const char *id, const char *org_id,
                      struct eph_run *out)
{
    struct sq_conn *s = READER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = prepare(s, "SELECT " RUN_COLUMNS " FROM runs WHERE id = ?", &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
        int r = sqlite3_step(st);
        if (r == SQLITE_ROW) {
            /* Another org's run is indistinguishable from no run at all. */
            if (org_id && strcmp((const char *)sqlite3_column_text(st, 1), org_id) != 0)
                rc = -ENOENT;
            else
                row_to_run(st, out);
        } else {
            rc = r == SQLITE_DONE ? -ENOENT : db_err(s, r, "run get");
        }
        done(st);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* Runs the rows of a prepared SELECT RUN_COLUMNS through cb, at most limit (0 = all). Called and
 * returns with the lock held; the callback runs with it released. */
static int each_run(struct sq_conn *s, sqlite3_stmt *st, unsigned limit, eph_run_cb cb, void *ctx,
                    bool *has_more)
{
    /* Collect first: callbacks may call back into the store. */
    struct eph_run *rows = NULL;
    size_t n = 0, cap = 0;
    int rc = 0, r;
    if (has_more)
        *has_more = false;
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
        if (limit && n == limit) {
            if (has_more)
                *has_more = true;
            break;
        }
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            struct eph_run *p = realloc(rows, ncap * sizeof(*rows));
            if (!p) {
                rc = -ENOMEM;
                break;
            }
            rows = p;
            cap = ncap;
        }
        row_to_run(st, &rows[n++]);
    }
    if (!rc && r != SQLITE_ROW && r != SQLITE_DONE)
        rc = db_err(s, r, "run list");
    done(st);
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < n; i++) {
        if (!rc)
            rc = cb(&rows[i], ctx);
        eph_run_release(&rows[i]);
    }
    free(rows);
    pthread_mutex_lock(&s->lock);
    return rc;
}

static int sq_run_list(struct eph_store *base, const char *org_id, unsigned limit,
                       const char *after, const char *status, const json_t *metadata, eph_run_cb cb,
                       void *ctx, bool *has_more)
{
    struct sq_conn *s = READER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = prepare(s,
                     "SELECT " RUN_COLUMNS " FROM runs WHERE org_id = ?1"
                     " AND (?2 IS NULL OR status = ?2)"
                     " AND (?3 IS NULL OR (created_at, rowid) < "
                     "  (SELECT created_at, rowid FROM runs WHERE id = ?3 AND org_id = ?1))"
                     /* every filter pair is one of the run's metadata pairs */
                     " AND (?5 IS NULL OR NOT EXISTS (SELECT 1 FROM json_each(?5) f"
                     "  WHERE NOT EXISTS (SELECT 1 FROM json_each(runs.metadata) m"
                     "   WHERE m.key = f.key AND m.type = 'text' AND m.value = f.value)))"
                     " ORDER BY created_at DESC, rowid DESC LIMIT ?4",
                     &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
        bind_text_or_null(st, 2, status);
        bind_text_or_null(st, 3, after);
        sqlite3_bind_int(st, 4, (int)limit + 1);
        if (metadata)
            bind_json_or_null(st, 5, metadata);
        rc = each_run(s, st, limit, cb, ctx, has_more);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sq_runs_in_state(struct eph_store *base, enum eph_run_status state, eph_run_cb cb,
                            void *ctx)
{
    struct sq_conn *s = READER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc =
        prepare(s, "SELECT " RUN_COLUMNS " FROM runs WHERE status = ? ORDER BY created_at", &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, eph_run_status_name(state), -1, SQLITE_STATIC);
        rc = each_run(s, st, 0, cb, ctx, NULL);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sq_run_update(struct eph_store *base, const struct eph_run *r)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = prepare(s,
                     "UPDATE runs SET status = ?, started_at = ?, sandbox_backend = ?, vcpus = ?, "
                     "memory_mib = ? WHERE id = ? AND status NOT IN ('completed', 'failed', "
                     "'timed_out', 'budget_exhausted', 'cancelled')",
                     &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, eph_run_status_name(r->status), -1, SQLITE_STATIC);
        bind_ms_or_null(st, 2, r->started_at_ms);
        bind_text_or_null(st, 3, r->sandbox_backend);
        sqlite3_bind_int(st, 4, (int)r->vcpus);
        sqlite3_bind_int(st, 5, (int)r->memory_mib);
        sqlite3_bind_text(st, 6, r->id, -1, SQLITE_TRANSIENT);
        rc = step_done(s, st, "run update");
        if (!rc && sqlite3_changes(s->db) == 0)
            rc = -EALREADY;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static void bind_usage_cost(sqlite3_stmt *st, int i, const struct eph_run *r)
{
    sqlite3_bind_int64(st, i++, (sqlite3_int64)r->usage.model_calls);
    sqlite3_bind_int64(st, i++, (sqlite3_int64)r->usage.input_tokens);
    sqlite3_bind_int64(st, i++, (sqlite3_int64)r->usage.output_tokens);
    sqlite3_bind_int64(st, i++, (sqlite3_int64)r->usage.shell_commands);
    sqlite3_bind_int64(st, i++, (sqlite3_int64)r->usage.web_requests);
    sqlite3_bind_int64(st, i++, (sqlite3_int64)r->usage.connection_requests);
    sqlite3_bind_int64(st, i++, r->cost.model_micros);
    sqlite3_bind_int64(st, i++, r->cost.web_micros);
    sqlite3_bind_int64(st, i, r->cost.compute_micros);
}

static int sq_run_progress(struct eph_store *base, const struct eph_run *r)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = prepare(s,
                     "UPDATE runs SET model_calls = ?, input_tokens = ?, output_tokens = ?, "
                     "shell_commands = ?, web_requests = ?, connection_requests = ?, "
                     "model_micros = ?, web_micros = ?, compute_micros = ? WHERE id = ? AND "
                     "status IN ('queued', 'starting', 'running')",
                     &st);
    if (!rc) {
        bind_usage_cost(st, 1, r);
        sqlite3_bind_text(st, 10, r->id, -1, SQLITE_TRANSIENT);
        rc = step_done(s, st, "run progress");
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sq_run_finish(struct eph_store *base, const struct eph_run_final *f)
{
    struct sq_conn *s = WRITER(base);
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
    pthread_mutex_lock(&s->lock);
    int rc = begin(s);
    if (rc)
        goto out;
    sqlite3_stmt *st;
    rc = prepare(s,
                 "UPDATE runs SET status = ?, finished_at = ?, result = ?, error_type = ?, "
                 "error_code = ?, error_message = ?, model_calls = ?, input_tokens = ?, "
                 "output_tokens = ?, shell_commands = ?, web_requests = ?, "
                 "connection_requests = ?, model_micros = ?, web_micros = ?, compute_micros = ?, "
                 "charged_micros = ?, released_micros = ?, log_expires_at = ?, "
                 "started_at = COALESCE(started_at, ?), "
                 "sandbox_backend = COALESCE(?, sandbox_backend), divergences = ?23 "
                 "WHERE id = ?21 AND status IN ('queued', 'starting', 'running') "
                 "AND (?22 = 0 OR lease_expires_at < ?22)",
                 &st);
    if (rc)
        goto fail;
    sqlite3_bind_text(st, 1, eph_run_status_name(r->status), -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, r->finished_at_ms);
    bind_text_or_null(st, 3, r->zdr ? NULL : r->result);
    bind_text_or_null(st, 4, r->error_type);
    bind_text_or_null(st, 5, r->error_code);
    bind_text_or_null(st, 6, r->error_message);
    bind_usage_cost(st, 7, r);
    sqlite3_bind_int64(st, 16, r->cost.charged_micros);
    sqlite3_bind_int64(st, 17, r->cost.released_micros);
    bind_ms_or_null(st, 18, r->log_expires_at_ms);
    bind_ms_or_null(st, 19, r->started_at_ms);
    bind_text_or_null(st, 20, r->sandbox_backend);
    sqlite3_bind_text(st, 21, r->id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 22, f->lease_expired_before_ms);
    sqlite3_bind_int64(st, 23, (int64_t)r->divergences);
    if ((rc = step_done(s, st, "run finish")))
        goto fail;
    if (sqlite3_changes(s->db) == 0) {
        rc = -EALREADY;
        goto fail;
    }
    int64_t now = r->finished_at_ms;
    if ((rc = insert_ledger(s, r->org_id, r->id, "charge", r->cost.charged_micros, now)) ||
        (rc = insert_ledger(s, r->org_id, r->id, "release", r->cost.released_micros, now)))
        goto fail;
    for (size_t i = 0; i < f->nevents; i++)
        if ((rc = event_insert_locked(s, r->id, &f->events[i])))
            goto fail;
    rc = commit(s);
    if (rc)
        goto fail;
    goto out;
fail:
    rollback(s);
out:
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sq_run_claim(struct eph_store *base, const char *run_id, const char *node_id,
                        int64_t lease_until_ms)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = prepare(s,
                     "UPDATE runs SET node_id = ?1, lease_expires_at = ?2 WHERE id = ?3 AND "
                     "status = 'queued' AND (node_id IS NULL OR node_id = ?1)",
                     &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, node_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 2, lease_until_ms);
        sqlite3_bind_text(st, 3, run_id, -1, SQLITE_TRANSIENT);
        rc = step_done(s, st, "run claim");
        if (!rc && sqlite3_changes(s->db) == 0)
            rc = -EALREADY;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* The runs of q->waiting as a JSON array (for json_each), or NULL without memory. */
static char *waiting_json(const struct eph_claim_next *q)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < q->nwaiting; i++)
        if (json_array_append_new(a, json_string(q->waiting[i]))) {
            json_decref(a);
            a = NULL;
        }
    char *text = a ? json_dumps(a, JSON_COMPACT) : NULL;
    json_decref(a);
    return text;
}

/* One node: every queued run is this node's to claim, a zero-data-retention one too. The choice
 * (docs/STORE.md, "Fair claims") and the claim are one statement on the writer. */
static int sq_run_claim_next(struct eph_store *base, const struct eph_claim_next *q, char *run_id,
                             size_t idlen)
{
    struct sq_conn *s = WRITER(base);
    char *waiting = waiting_json(q);
    if (!waiting)
        return -ENOMEM;
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = prepare(
        s,
        "UPDATE runs SET node_id = ?1, lease_expires_at = ?2 WHERE rowid = ("
        "SELECT r.rowid FROM (SELECT "
        "(SELECT COUNT(*) FROM runs a WHERE a.org_id = o.id AND a.node_id IS NOT NULL AND "
        "a.status IN ('queued', 'starting', 'running')) AS n, "
        "(SELECT h.rowid FROM runs h WHERE h.org_id = o.id AND h.status = 'queued' AND "
        "(h.node_id IS NULL OR (h.node_id = ?1 AND h.id IN (SELECT value FROM json_each(?4)))) "
        "ORDER BY h.created_at, h.rowid LIMIT 1) AS head FROM orgs o) f "
        "JOIN runs r ON r.rowid = f.head WHERE ?3 = 0 OR f.n < ?3 "
        "ORDER BY f.n, r.created_at, r.rowid LIMIT 1) RETURNING id",
        &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, q->node_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 2, q->lease_until_ms);
        sqlite3_bind_int64(st, 3, q->max_per_org);
        sqlite3_bind_text(st, 4, waiting, -1, SQLITE_STATIC);
        int r = sqlite3_step(st);
        if (r == SQLITE_ROW) {
            const unsigned char *id = sqlite3_column_text(st, 0);
            snprintf(run_id, idlen, "%s", id ? (const char *)id : "");
            r = sqlite3_step(st);
        } else {
            rc = -ENOENT;
        }
        if (r != SQLITE_DONE)
            rc = db_err(s, r, "claim next");
        done(st);
    }
    pthread_mutex_unlock(&s->lock);
    free(waiting);
    return rc;
}

static int sq_run_renew(struct eph_store *base, const char *run_id, const char *node_id,
                        int64_t lease_until_ms, int64_t compute_micros)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    /* The checkpoint never lowers what was measured and never exceeds what the reservation leaves
     * after the model and web charges. */
    int rc = prepare(s,
                     "UPDATE runs SET lease_expires_at = ?1, compute_micros = "
                     "MAX(compute_micros, MIN(?2, reserved_micros - model_micros - web_micros)) "
                     "WHERE id = ?3 AND node_id = ?4 AND status IN ('queued', 'starting', "
                     "'running')",
                     &st);
    if (!rc) {
        sqlite3_bind_int64(st, 1, lease_until_ms);
        sqlite3_bind_int64(st, 2, compute_micros);
        sqlite3_bind_text(st, 3, run_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 4, node_id, -1, SQLITE_TRANSIENT);
        rc = step_done(s, st, "run renew");
        if (!rc && sqlite3_changes(s->db) == 0)
            rc = -ESTALE;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sq_runs_lease_expired(struct eph_store *base, int64_t now_ms, eph_run_cb cb, void *ctx)
{
    struct sq_conn *s = READER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = prepare(s,
                     "SELECT " RUN_COLUMNS " FROM runs WHERE status IN ('queued', 'starting', "
                     "'running') AND node_id IS NOT NULL AND lease_expires_at < ? "
                     "ORDER BY created_at",
                     &st);
    if (!rc) {
        sqlite3_bind_int64(st, 1, now_ms);
        rc = each_run(s, st, 0, cb, ctx, NULL);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sq_purge_logs(struct eph_store *base, int64_t now_ms, unsigned *purged)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    int rc = begin(s);
    if (rc)
        goto out;
    /* Events keep their type and timing; their message and data (commands, outputs) go, and so
     * does the stored text that carried them (it is made again, from what is left, on read). */
    sqlite3_stmt *st;
    if ((rc = prepare(s,
                      "UPDATE events SET message = type, data = '{}', wire = NULL WHERE run_id IN "
                      "(SELECT id FROM runs WHERE log_purged = 0 AND log_expires_at <= ?)",
                      &st)))
        goto fail;
    sqlite3_bind_int64(st, 1, now_ms);
    if ((rc = step_done(s, st, "purge events")))
        goto fail;
    if ((rc = prepare(s,
                      "UPDATE runs SET prompt = NULL, files = NULL, result = NULL, log_purged = 1 "
                      "WHERE log_purged = 0 AND log_expires_at <= ?",
                      &st)))
        goto fail;
    sqlite3_bind_int64(st, 1, now_ms);
    if ((rc = step_done(s, st, "purge runs")))
        goto fail;
    *purged = (unsigned)sqlite3_changes(s->db);
    if ((rc = commit(s)))
        goto fail;
    goto out;
fail:
    rollback(s);
out:
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sq_event_append(struct eph_store *base, const char *run_id, const struct eph_event *e)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    int rc = event_insert_locked(s, run_id, e);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sq_events_list(struct eph_store *base, const char *run_id, uint64_t after_seq,
                          unsigned limit, eph_event_cb cb, void *ctx)
{
    struct sq_conn *s = READER(base);
    struct eph_event *rows = NULL;
    size_t n = 0, cap = 0;
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = prepare(s,
                     "SELECT seq, t_ms, at_ms, source, type, message, data, wire FROM events "
                     "WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                     &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, run_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)after_seq);
        sqlite3_bind_int(st, 3, limit ? (int)limit : -1);
        int r;
        while ((r = sqlite3_step(st)) == SQLITE_ROW) {
            if (n == cap) {
                size_t ncap = cap ? cap * 2 : 32;
                struct eph_event *p = realloc(rows, ncap * sizeof(*rows));
                if (!p) {
                    rc = -ENOMEM;
                    break;
                }
                rows = p;
                cap = ncap;
            }
            struct eph_event *e = &rows[n++];
            memset(e, 0, sizeof(*e));
            e->seq = (uint64_t)sqlite3_column_int64(st, 0);
            e->t_ms = sqlite3_column_int64(st, 1);
            e->at_ms = sqlite3_column_int64(st, 2);
            snprintf(e->source, sizeof(e->source), "%s", sqlite3_column_text(st, 3));
            snprintf(e->type, sizeof(e->type), "%s", sqlite3_column_text(st, 4));
            e->message = col_strdup(st, 5);
            e->wire = col_strdup(st, 7);
            e->data = eph_event_stored_data(e->wire, (const char *)sqlite3_column_text(st, 6));
        }
        if (!rc && r != SQLITE_DONE)
            rc = db_err(s, r, "events list");
        done(st);
    }
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < n; i++) {
        if (!rc)
            rc = cb(&rows[i], ctx);
        eph_event_release(&rows[i]);
    }
    free(rows);
    return rc;
}

static int sq_idem_begin(struct eph_store *base, const char *org_id, const char *key,
                         const char *request_hash, const char *pending, int64_t now_ms,
                         int64_t expired_before_ms, struct eph_idem *existing)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    int rc = begin(s);
    if (rc)
        goto out;
    sqlite3_stmt *st;
    /* An expired key is gone, whether or not the reaper has come by yet. */
    if ((rc = prepare(s, "DELETE FROM idempotency WHERE org_id = ? AND key = ? AND created_at < ?",
                      &st)))
        goto fail;
    sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, key, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 3, expired_before_ms);
    if ((rc = step_done(s, st, "idempotency expire key")))
        goto fail;
    if ((rc = prepare(s,
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
        existing->response_body = col_strdup(st, 2);
        existing->created_at_ms = sqlite3_column_int64(st, 3);
        done(st);
        rc = -EEXIST;
        goto fail;
    }
    done(st);
    if (r != SQLITE_DONE) {
        rc = db_err(s, r, "idempotency lookup");
        goto fail;
    }
    if ((rc = prepare(s,
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
    if ((rc = step_done(s, st, "idempotency insert")) || (rc = commit(s)))
        goto fail;
    goto out;
fail:
    rollback(s);
out:
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sq_idem_complete(struct eph_store *base, const char *org_id, const char *key,
                            int status_code, const char *body)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = prepare(s,
                     "UPDATE idempotency SET status_code = ?, response_body = ? "
                     "WHERE org_id = ? AND key = ?",
                     &st);
    if (!rc) {
        sqlite3_bind_int(st, 1, status_code);
        sqlite3_bind_text(st, 2, body, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 3, org_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 4, key, -1, SQLITE_TRANSIENT);
        rc = step_done(s, st, "idempotency complete");
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sq_idem_abandon(struct eph_store *base, const char *org_id, const char *key)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc =
        prepare(s, "DELETE FROM idempotency WHERE org_id = ? AND key = ? AND status_code = 0", &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, key, -1, SQLITE_TRANSIENT);
        rc = step_done(s, st, "idempotency abandon");
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sq_idem_expire(struct eph_store *base, int64_t cutoff_ms)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = prepare(s, "DELETE FROM idempotency WHERE created_at < ?", &st);
    if (!rc) {
        sqlite3_bind_int64(st, 1, cutoff_ms);
        rc = step_done(s, st, "idempotency expire");
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sq_idem_recover(struct eph_store *base, int64_t stale_before_ms, unsigned *completed,
                           unsigned *dropped)
{
    struct sq_conn *s = WRITER(base);
    *completed = *dropped = 0;
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    /* A pending body is the create's own answer: completing it is setting its status. */
    int rc = prepare(s,
                     "UPDATE idempotency SET status_code = 201 WHERE status_code = 0 AND "
                     "response_body IS NOT NULL AND EXISTS (SELECT 1 FROM runs WHERE "
                     "runs.org_id = idempotency.org_id AND "
                     "runs.id = json_extract(idempotency.response_body, '$.id'))",
                     &st);
    if (!rc && !(rc = step_done(s, st, "idempotency recover")))
        *completed = (unsigned)sqlite3_changes(s->db);
    if (!rc && !(rc = prepare(s,
                              "DELETE FROM idempotency WHERE status_code = 0 AND "
                              "response_body IS NOT NULL AND created_at < ? AND NOT EXISTS "
                              "(SELECT 1 FROM runs WHERE runs.org_id = idempotency.org_id AND "
                              "runs.id = json_extract(idempotency.response_body, '$.id'))",
                              &st))) {
        sqlite3_bind_int64(st, 1, stale_before_ms);
        if (!(rc = step_done(s, st, "idempotency drop stale")))
            *dropped = (unsigned)sqlite3_changes(s->db);
    }
    pthread_mutex_unlock(&s->lock);
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
    .run_insert = sq_run_insert,
    .run_insert_capped = sq_run_insert_capped,
    .runs_count_queued = sq_runs_count_queued,
    .runs_count_by_status = sq_runs_count_by_status,
    .run_get = sq_run_get,
    .run_list = sq_run_list,
    .run_update = sq_run_update,
    .run_progress = sq_run_progress,
    .run_finish = sq_run_finish,
    .runs_in_state = sq_runs_in_state,
    .run_claim = sq_run_claim,
    .run_claim_next = sq_run_claim_next,
    .run_renew = sq_run_renew,
    .runs_lease_expired = sq_runs_lease_expired,
    .purge_logs = sq_purge_logs,
    .event_append = sq_event_append,
    .events_list = sq_events_list,
    .idem_begin = sq_idem_begin,
    .idem_complete = sq_idem_complete,
    .idem_abandon = sq_idem_abandon,
    .idem_expire = sq_idem_expire,
    .idem_recover = sq_idem_recover,
    .ledger_totals = sq_ledger_totals,
};
