/*
 * sqlite_store.h - what the SQLite store's files share (sqlite.c, sqlite_orgs.c, sqlite_runs.c,
 * sqlite_idem.c): the connections, the statement helpers, and the operations the ops table in
 * sqlite.c names. Private to src/store/.
 */
#ifndef EPH_SQLITE_STORE_H
#define EPH_SQLITE_STORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>
#include <sqlite3.h>

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
#define READER(b) sq_pick_reader(S(b))

/* The connections' helpers (sqlite.c). */
int sq_db_err(struct sq_conn *s, int rc, const char *what);
int sq_prepare(struct sq_conn *s, const char *sql, sqlite3_stmt **st);
void sq_done(sqlite3_stmt *st);
int sq_step_done(struct sq_conn *s, sqlite3_stmt *st, const char *what);
int sq_begin(struct sq_conn *s);
int sq_commit(struct sq_conn *s);
void sq_rollback(struct sq_conn *s);
void sq_bind_text(sqlite3_stmt *st, int i, const char *v);
void sq_bind_json(sqlite3_stmt *st, int i, const json_t *v);
void sq_bind_ms(sqlite3_stmt *st, int i, int64_t ms);
char *sq_col_strdup(sqlite3_stmt *st, int i);
/* *out = a copy of column i (NULL for SQL NULL): 0, or -ENOMEM when the copy could not be made
 * (a row is never handed on with a field missing). */
int sq_col_dup(sqlite3_stmt *st, int i, char **out) __attribute__((warn_unused_result));
json_t *sq_col_json(sqlite3_stmt *st, int i);
struct sq_conn *sq_pick_reader(struct sqlite_store *s);

/* Orgs, keys, connections, the ledger and balances (sqlite_orgs.c). */
int sq_insert_ledger(struct sq_conn *s, const char *org_id, const char *run_id, const char *kind,
                     int64_t micros, int64_t now);
int sq_org_find(struct eph_store *base, const char *name, char *org_id, size_t idlen);
int sq_org_ensure(struct eph_store *base, const char *name, int64_t initial_credit, char *org_id,
                  size_t idlen, bool *created);
int sq_credit_add(struct eph_store *base, const char *org_id, int64_t micros);
int sq_key_insert(struct eph_store *base, const char *org_id, const char *key_hash,
                  const char *role, const char *prefix, char *key_id, size_t idlen);
int sq_key_lookup(struct eph_store *base, const char *key_hash, char *org_id, size_t idlen,
                  char *role, size_t rolelen);
int sq_key_list(struct eph_store *base, const char *org_id, eph_key_cb cb, void *ctx);
int sq_key_revoke(struct eph_store *base, const char *org_id, const char *key_id, int64_t now_ms);
int sq_conn_insert(struct eph_store *base, const char *org_id, const struct eph_connection *c,
                   char *conn_id, size_t idlen);
int sq_conn_list(struct eph_store *base, const char *org_id, eph_conn_cb cb, void *ctx);
int sq_conn_get(struct eph_store *base, const char *org_id, const char *name,
                struct eph_connection *out);
int sq_conn_delete(struct eph_store *base, const char *org_id, const char *name_or_id);
int sq_balance_locked(struct sq_conn *s, const char *org_id, struct eph_balance *out);
int sq_balance(struct eph_store *base, const char *org_id, struct eph_balance *out);
int sq_ledger_totals(struct eph_store *base, const char *org_id, int64_t *credits,
                     int64_t *reserves, int64_t *charges, int64_t *releases);

/* Runs, leases, claims and events (sqlite_runs.c). */
int sq_runs_count_queued(struct eph_store *base, const char *org_id, unsigned *out);
int sq_runs_count_by_status(struct eph_store *base, eph_status_count_cb cb, void *ctx);
int sq_run_insert_capped(struct eph_store *base, const struct eph_run *r,
                         const struct eph_event *first, unsigned max_queued);
int sq_run_insert(struct eph_store *base, const struct eph_run *r, const struct eph_event *first);
int sq_run_get(struct eph_store *base, const char *id, const char *org_id, struct eph_run *out);
int sq_run_list(struct eph_store *base, const char *org_id, unsigned limit, const char *after,
                const char *status, const json_t *metadata, enum eph_run_kind kind, eph_run_cb cb,
                void *ctx, bool *has_more);
int sq_runs_in_state(struct eph_store *base, enum eph_run_status state, eph_run_cb cb, void *ctx);
int sq_run_update(struct eph_store *base, const struct eph_run *r);
int sq_run_progress(struct eph_store *base, const struct eph_run *r);
int sq_run_step(struct eph_store *base, const struct eph_run *r, unsigned what,
                const struct eph_event *events, size_t n);
int sq_run_finish(struct eph_store *base, const struct eph_run_final *f);
int sq_run_claim(struct eph_store *base, const char *run_id, const char *node_id,
                 int64_t lease_until_ms);
int sq_run_claim_start(struct eph_store *base, const char *run_id, const char *node_id,
                       int64_t lease_until_ms, int64_t started_at_ms);
int sq_run_claim_next(struct eph_store *base, const struct eph_claim_next *q, char *run_id,
                      size_t idlen);
int sq_run_renew(struct eph_store *base, const char *run_id, const char *node_id,
                 int64_t lease_until_ms, int64_t compute_micros);
int sq_runs_lease_expired(struct eph_store *base, int64_t now_ms, eph_run_cb cb, void *ctx);
int sq_purge_logs(struct eph_store *base, int64_t now_ms, unsigned *purged);
/* A run's outputs (sqlite_outputs.c). */
int sq_run_outputs_put(struct eph_store *base, const char *run_id, const struct eph_outputs *o);
int sq_run_outputs_list(struct eph_store *base, const char *run_id, struct eph_outputs *out);
int sq_run_output_get(struct eph_store *base, const char *run_id, const char *path,
                      struct eph_output *out);
int sq_event_append(struct eph_store *base, const char *run_id, const struct eph_event *e);
int sq_events_list(struct eph_store *base, const char *run_id, uint64_t after_seq, unsigned limit,
                   eph_event_cb cb, void *ctx);

/* Idempotency records (sqlite_idem.c). */
int sq_idem_begin(struct eph_store *base, const char *org_id, const char *key,
                  const char *request_hash, const char *pending, int64_t now_ms,
                  int64_t expired_before_ms, struct eph_idem *existing);
int sq_idem_complete(struct eph_store *base, const char *org_id, const char *key, int status_code,
                     const char *body);
int sq_idem_abandon(struct eph_store *base, const char *org_id, const char *key);
int sq_idem_expire(struct eph_store *base, int64_t cutoff_ms);
int sq_idem_recover(struct eph_store *base, int64_t stale_before_ms, unsigned *completed,
                    unsigned *dropped);

/* Images (sqlite_images.c). */
int sq_image_insert(struct eph_store *base, const struct eph_image_rec *r);
int sq_image_update(struct eph_store *base, const struct eph_image_rec *r);
int sq_image_get(struct eph_store *base, const char *org_id, const char *name,
                 struct eph_image_rec *out);
int sq_image_list(struct eph_store *base, const char *org_id, eph_image_cb cb, void *ctx);
int sq_image_delete(struct eph_store *base, const char *org_id, const char *name);

/* Webhooks (sqlite_webhooks.c). */
int sq_webhook_insert(struct eph_store *base, const struct eph_webhook *w);
int sq_webhook_list(struct eph_store *base, const char *org_id, eph_webhook_cb cb, void *ctx);
int sq_webhook_get(struct eph_store *base, const char *org_id, const char *id,
                   struct eph_webhook *out);
int sq_webhook_delete(struct eph_store *base, const char *org_id, const char *id, int64_t now_ms);
int sq_webhook_deliveries(struct eph_store *base, const char *org_id, const char *webhook_id,
                          unsigned limit, const char *after, eph_delivery_cb cb, void *ctx,
                          bool *has_more);
int sq_webhook_delivery_get(struct eph_store *base, const char *org_id, const char *webhook_id,
                            const char *event_id, struct eph_webhook_delivery *out);
int sq_webhook_attempts(struct eph_store *base, const char *org_id, const char *webhook_id,
                        const char *event_id, unsigned limit, eph_attempt_cb cb, void *ctx);
int sq_webhook_claim(struct eph_store *base, const char *node_id, int64_t now_ms,
                     int64_t claim_until_ms, unsigned max, eph_delivery_cb cb, void *ctx);
int sq_webhook_record(struct eph_store *base, const struct eph_webhook_attempt *a);
int sq_webhook_enqueue_locked(struct sq_conn *s, const char *org_id,
                              const struct eph_webhook_event *ev);

#endif
