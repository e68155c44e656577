/*
 * postgres_store.h - what the PostgreSQL store's files share (postgres.c, postgres_orgs.c,
 * postgres_runs.c, postgres_idem.c, postgres_notify.c): the pool and its retry rule, parameters,
 * statements and columns, and the operations the ops table in postgres.c names. Private to
 * src/store/.
 */
#ifndef EPH_POSTGRES_STORE_H
#define EPH_POSTGRES_STORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <jansson.h>
#include <libpq-fe.h>

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
    unsigned long round_trips; /* under lock: round trips (a statement, a prepare, a batch) */
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

static inline void p_text(struct params *p, const char *s)
{
    p->v[p->n++] = s;
}

static inline void p_i64(struct params *p, int64_t v)
{
    snprintf(p->num[p->n], sizeof(p->num[p->n]), "%lld", (long long)v);
    p->v[p->n] = p->num[p->n];
    p->n++;
}

/* 0 is "not yet": NULL. */
static inline void p_ms(struct params *p, int64_t ms)
{
    if (ms)
        p_i64(p, ms);
    else
        p_text(p, NULL);
}

static inline void p_json(struct params *p, const json_t *j, const char *dflt)
{
    char *t = j ? json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    p->owned[p->n] = t;
    p->v[p->n++] = t ? t : dflt;
}

static inline void p_blob(struct params *p, const unsigned char *b, size_t len)
{
    p->v[p->n] = (const char *)b;
    p->len[p->n] = (int)len;
    p->fmt[p->n] = 1;
    p->n++;
}

static inline void p_free(struct params *p)
{
    for (int i = 0; i < p->n; i++)
        free(p->owned[i]);
}

/* The pool, statements and columns (postgres.c). */
struct pg_conn *pg_pool_get_as(struct pg_store *s, bool urgent);
struct pg_conn *pg_pool_get(struct pg_store *s);
void pg_pool_put(struct pg_store *s, struct pg_conn *c);
int pg_exec(struct pg_store *s, struct pg_conn *c, const char *sql, struct params *p,
            PGresult **out, unsigned long *changed, const char *what);
int pg_begin(struct pg_store *s, struct pg_conn *c);
/* A batch (docs/STORE.md, "A step, one round trip"): statements sent at once in libpq's pipeline
 * mode and read back together, one round trip and one implicit transaction: all of them are
 * committed or none (the first error rolls the rest back). A statement whose guard is set
 * divides by the count of what it did ("SELECT 1 / COUNT(*) ..."): when it did nothing, the
 * division fails the batch and pg_batch_run returns that guard (an errno) instead. */
#define PG_BATCH_MAX 16
struct pg_batch {
    struct {
        const char *sql; /* a constant: prepared once per connection by its address */
        struct params p;
        const char *what;
        int guard; /* 0, or the negative errno its division by zero means */
    } v[PG_BATCH_MAX];
    size_t n;
};
int pg_batch_run(struct pg_store *s, struct pg_conn *c, const struct pg_batch *b);
/* The next statement of b, for its parameters; NULL when b is full (PG_BATCH_MAX). */
struct params *pg_batch_add(struct pg_batch *b, const char *sql, const char *what, int guard);
/* Frees what the parameters of b's statements own, and b (calloc'ed). */
void pg_batch_free(struct pg_batch *b);
/* A ledger entry of a run (reserve, charge or release: never a credit) and the org's running
 * totals moved, as two statements of b (-ENOENT when the org is not there); -E2BIG when b is
 * full. */
int pg_batch_ledger(struct pg_batch *b, const char *org_id, const char *run_id, const char *kind,
                    int64_t micros, int64_t now);
int pg_commit(struct pg_store *s, struct pg_conn *c);
void pg_rollback(struct pg_conn *c);
bool pg_retry_wait(struct pg_store *s, unsigned attempt);
bool pg_isnull(const PGresult *r, int row, int col);
const char *pg_val(const PGresult *r, int row, int col);
int64_t pg_col_i64(const PGresult *r, int row, int col);
char *pg_col_strdup(const PGresult *r, int row, int col);
/* *out = a copy of the field (NULL for SQL NULL): 0, or -ENOMEM when the copy could not be made
 * (a row is never handed on with a field missing). */
int pg_col_dup(const PGresult *r, int row, int col, char **out) __attribute__((warn_unused_result));
json_t *pg_col_json(const PGresult *r, int row, int col);
void pg_col_copy(const PGresult *r, int row, int col, char *out, size_t outlen);
int pg_select_once(struct pg_store *s, struct pg_conn *c, const char *sql, struct params *p,
                   PGresult **out, const char *what);
int pg_changed_once(struct pg_store *s, struct pg_conn *c, const char *sql, struct params *p,
                    unsigned long *n, const char *what);

/* Orgs, the ledger, keys and connections (postgres_orgs.c). */
int pg_insert_ledger(struct pg_store *s, struct pg_conn *c, const char *org_id, const char *run_id,
                     const char *kind, int64_t micros, int64_t now);
int pg_org_find(struct eph_store *base, const char *name, char *org_id, size_t idlen);
int pg_org_ensure(struct eph_store *base, const char *name, int64_t initial_credit, char *org_id,
                  size_t idlen, bool *created);
int pg_credit_add(struct eph_store *base, const char *org_id, int64_t micros);
int pg_balance_once(struct pg_store *s, struct pg_conn *c, const char *org_id,
                    struct eph_balance *out, bool lock);
int pg_balance(struct eph_store *base, const char *org_id, struct eph_balance *out);
int pg_ledger_totals(struct eph_store *base, const char *org_id, int64_t *credits,
                     int64_t *reserves, int64_t *charges, int64_t *releases);
int pg_key_insert(struct eph_store *base, const char *org_id, const char *key_hash,
                  const char *role, const char *prefix, char *key_id, size_t idlen);
int pg_key_lookup(struct eph_store *base, const char *key_hash, char *org_id, size_t idlen,
                  char *role, size_t rolelen);
int pg_key_list(struct eph_store *base, const char *org_id, eph_key_cb cb, void *ctx);
int pg_key_revoke(struct eph_store *base, const char *org_id, const char *key_id, int64_t now_ms);
int pg_conn_insert(struct eph_store *base, const char *org_id, const struct eph_connection *cn,
                   char *conn_id, size_t idlen);
int pg_conn_list(struct eph_store *base, const char *org_id, eph_conn_cb cb, void *ctx);
int pg_conn_get(struct eph_store *base, const char *org_id, const char *name,
                struct eph_connection *out);
int pg_conn_delete(struct eph_store *base, const char *org_id, const char *name_or_id);

/* Runs, claims and events (postgres_runs.c). */
int pg_runs_count_queued(struct eph_store *base, const char *org_id, unsigned *out);
int pg_runs_count_by_status(struct eph_store *base, eph_status_count_cb cb, void *ctx);
int pg_run_insert_capped(struct eph_store *base, const struct eph_run *r,
                         const struct eph_event *first, unsigned max_queued);
int pg_run_insert(struct eph_store *base, const struct eph_run *r, const struct eph_event *first);
int pg_run_get(struct eph_store *base, const char *id, const char *org_id, struct eph_run *out);
int pg_run_list(struct eph_store *base, const char *org_id, unsigned limit, const char *after,
                const char *status, const json_t *metadata, enum eph_run_kind kind, eph_run_cb cb,
                void *ctx, bool *has_more);
int pg_runs_in_state(struct eph_store *base, enum eph_run_status state, eph_run_cb cb, void *ctx);
int pg_run_update(struct eph_store *base, const struct eph_run *r);
int pg_run_progress(struct eph_store *base, const struct eph_run *r);
int pg_run_step(struct eph_store *base, const struct eph_run *r, unsigned what,
                const struct eph_event *events, size_t n);
int pg_run_finish(struct eph_store *base, const struct eph_run_final *f);
int pg_run_claim(struct eph_store *base, const char *run_id, const char *node_id,
                 int64_t lease_until_ms);
int pg_run_claim_start(struct eph_store *base, const char *run_id, const char *node_id,
                       int64_t lease_until_ms, int64_t started_at_ms);
int pg_run_renew(struct eph_store *base, const char *run_id, const char *node_id,
                 int64_t lease_until_ms, int64_t compute_micros);
int pg_runs_lease_expired(struct eph_store *base, int64_t now_ms, eph_run_cb cb, void *ctx);
int pg_purge_logs(struct eph_store *base, int64_t now_ms, unsigned *purged);
/* A run's outputs (postgres_outputs.c). */
int pg_run_outputs_put(struct eph_store *base, const char *run_id, const struct eph_outputs *o);
int pg_run_outputs_list(struct eph_store *base, const char *run_id, struct eph_outputs *out);
int pg_run_output_get(struct eph_store *base, const char *run_id, const char *path,
                      struct eph_output *out);
int pg_event_append(struct eph_store *base, const char *run_id, const struct eph_event *e);
int pg_events_list(struct eph_store *base, const char *run_id, uint64_t after_seq, unsigned limit,
                   eph_event_cb cb, void *ctx);
int pg_run_claim_next(struct eph_store *base, const struct eph_claim_next *q, char *run_id,
                      size_t idlen);

/* Idempotency records (postgres_idem.c). */
int pg_idem_begin(struct eph_store *base, const char *org_id, const char *key,
                  const char *request_hash, const char *pending, int64_t now_ms,
                  int64_t expired_before_ms, struct eph_idem *existing);
int pg_idem_complete(struct eph_store *base, const char *org_id, const char *key, int status_code,
                     const char *body);
int pg_idem_abandon(struct eph_store *base, const char *org_id, const char *key);
int pg_idem_expire(struct eph_store *base, int64_t cutoff_ms);
int pg_idem_recover(struct eph_store *base, int64_t stale_before_ms, unsigned *completed,
                    unsigned *dropped);

/* Notifications between nodes (postgres_notify.c). */
int pg_listen(struct eph_store *base, const struct eph_store_listener *l);
int pg_notify_cancel(struct eph_store *base, const char *run_id);
int pg_node_put(struct eph_store *base, const char *node_id, const char *url, int64_t now_ms);
int pg_node_url(struct eph_store *base, const char *node_id, char *url, size_t len);

/* Images (postgres_images.c). */
int pg_image_insert(struct eph_store *base, const struct eph_image_rec *r);
int pg_image_update(struct eph_store *base, const struct eph_image_rec *r);
int pg_image_get(struct eph_store *base, const char *org_id, const char *name,
                 struct eph_image_rec *out);
int pg_image_list(struct eph_store *base, const char *org_id, eph_image_cb cb, void *ctx);
int pg_image_delete(struct eph_store *base, const char *org_id, const char *name);

/* Runs one operation on a pooled connection, retrying the whole operation while the connection
 * fails. expr sees `c`. WITH_CONN_URGENT goes before ordinary waiters (conn_get_as). */
#define WITH_CONN(s, expr) WITH_CONN_AS(s, false, expr)
#define WITH_CONN_URGENT(s, expr) WITH_CONN_AS(s, true, expr)
#define WITH_CONN_AS(s, urgent, expr)                                                              \
    ({                                                                                             \
        int _rc;                                                                                   \
        unsigned _try = 0;                                                                         \
        do {                                                                                       \
            struct pg_conn *c = pg_pool_get_as(s, urgent);                                         \
            if (!c) {                                                                              \
                _rc = -ENOTCONN;                                                                   \
            } else {                                                                               \
                _rc = (expr);                                                                      \
                if (_rc)                                                                           \
                    pg_rollback(c);                                                                \
                pg_pool_put(s, c);                                                                 \
            }                                                                                      \
        } while (_rc == -ENOTCONN && pg_retry_wait(s, ++_try));                                    \
        _rc;                                                                                       \
    })

/* Webhooks (postgres_webhooks.c). */
int pg_webhook_insert(struct eph_store *base, const struct eph_webhook *w);
int pg_webhook_list(struct eph_store *base, const char *org_id, eph_webhook_cb cb, void *ctx);
int pg_webhook_get(struct eph_store *base, const char *org_id, const char *id,
                   struct eph_webhook *out);
int pg_webhook_delete(struct eph_store *base, const char *org_id, const char *id, int64_t now_ms);
int pg_webhook_deliveries(struct eph_store *base, const char *org_id, const char *webhook_id,
                          unsigned limit, const char *after, eph_delivery_cb cb, void *ctx,
                          bool *has_more);
int pg_webhook_delivery_get(struct eph_store *base, const char *org_id, const char *webhook_id,
                            const char *event_id, struct eph_webhook_delivery *out);
int pg_webhook_attempts(struct eph_store *base, const char *org_id, const char *webhook_id,
                        const char *event_id, unsigned limit, eph_attempt_cb cb, void *ctx);
int pg_webhook_claim(struct eph_store *base, const char *node_id, int64_t now_ms,
                     int64_t claim_until_ms, unsigned max, eph_delivery_cb cb, void *ctx);
int pg_webhook_record(struct eph_store *base, const struct eph_webhook_attempt *a);
/* Within run_finish's transaction on c. */
/* The deliveries of a webhook event, as a statement of its own or of a batch (the settlement). */
extern const char pg_webhook_enqueue_sql[];
void pg_webhook_enqueue_params(struct params *p, const char *org_id,
                               const struct eph_webhook_event *ev);
int pg_webhook_enqueue(struct pg_store *s, struct pg_conn *c, const char *org_id,
                       const struct eph_webhook_event *ev);

#endif
