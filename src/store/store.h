/*
 * store.h - durable state behind one interface (struct eph_store_ops), SQLite or PostgreSQL
 * (docs/STORE.md). The store knows organizations, API keys, the ledger, runs, their events and
 * idempotency records. Every operation that moves money is one transaction together with the
 * state change it belongs to, so that a crash at any instant leaves either both or neither.
 *
 * Ownership: strings and structs filled by a store function belong to the caller
 * (eph_run_release(), free()). Errors: 0 or a negative errno; -ENOENT no such object, -EDQUOT the
 * balance cannot cover a reservation, -EEXIST a uniqueness conflict, -EOVERFLOW an amount the
 * running totals cannot hold (nothing written), -EIO the database failed (logged with its
 * message), -EROFS / -ENOSPC passed through from the database, -ENOTCONN the database cannot be
 * reached (PostgreSQL: retried by the caller).
 *
 * Threads: a store may be used from every thread at once.
 */
#ifndef EPH_STORE_H
#define EPH_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "store/output_record.h"
#include "store/run_record.h"

struct eph_store;

struct eph_event {
    uint64_t seq;
    int64_t t_ms;  /* since the run was created */
    int64_t at_ms; /* wall clock */
    char source[16];
    char type[32];
    char *message;
    json_t *data; /* object, never NULL once filled */
    char *wire;   /* the JSON text the API serves (run/event_wire.h); NULL: not stored */
};

void eph_event_release(struct eph_event *e);
/* An event is written once: with its wire text, the stores keep no second copy of data (the
 * column holds '{}'); reading it back takes data from the wire's "data" member. The data of a
 * stored row (wire may be NULL: an old or scrubbed row, whose data column is its own): a new
 * reference (an empty object when there is none, or when the text is not JSON), NULL only
 * without memory. */
json_t *eph_event_stored_data(const char *wire, const char *data_column);

struct eph_balance {
    int64_t balance_micros;   /* credits - charges */
    int64_t reserved_micros;  /* held by live runs */
    int64_t available_micros; /* balance - reserved */
};

/* A webhook event (docs/WEBHOOKS.md) made when a run settles: one delivery of it is queued, in
 * the settlement's transaction, for each endpoint of the run's org that takes its type. */
struct eph_webhook_event {
    char id[40];      /* evt_... */
    const char *type; /* "run.completed", ... */
    const char *body; /* the JSON text every endpoint is sent */
    int64_t created_at_ms;
};

/* What settles a run: its final state and the events that close its timeline. */
struct eph_run_final {
    const struct eph_run *run;      /* status, finished_at, result, error, usage, cost incl.
                                       charged/released, log_expires_at */
    const struct eph_event *events; /* appended in the same transaction */
    size_t nevents;
    /* Non-zero: settle only if the run's lease ended before this instant (another node finishing
     * a lost run); -EALREADY when the owner renewed it meanwhile. */
    int64_t lease_expired_before_ms;
    const struct eph_webhook_event *webhook; /* NULL: none queued */
};

struct eph_idem {
    char request_hash[65];
    int status_code;     /* 0 while the first request is in flight */
    char *response_body; /* NULL while in flight */
    int64_t created_at_ms;
};

/* An API key as listed: never the key, never its hash. */
struct eph_key_info {
    char id[48];
    char role[16];
    char prefix[16]; /* the key's first characters ("eph_" + 4), to recognise it */
    int64_t created_at_ms;
};

/* A connection (docs/BROKER.md) as stored. The credential headers are sealed by the caller (see
 * common/secret.h) before they reach the store: the store holds an opaque blob and the header
 * names, never a header value in the clear. */
struct eph_connection {
    char id[48];
    char name[72];
    char *base_url;
    json_t *methods;       /* array of strings */
    json_t *path_prefixes; /* array of strings */
    json_t *header_names;  /* array of strings: names only */
    json_t *query_names;   /* array of strings: query-parameter credential names only */
    /* nonce || secretbox(JSON): {"headers": {name: value}, "query": {name: value}}, or (before
     * query parameters) the headers object alone */
    unsigned char *sealed;
    size_t sealed_len;
    int64_t created_at_ms;
};

void eph_connection_release(struct eph_connection *c);

/* An image (docs/IMAGES.md) as stored: an org's, or the operator's (org_id "") that every org
 * sees. */
struct eph_image_rec {
    char org_id[48];
    char name[64];
    char status[12]; /* building | ready | failed */
    char digest[72];
    int64_t size_bytes;
    json_t *recipe; /* the canonical recipe, or {"archive": DIGEST} for an import */
    int64_t created_at_ms;
    char *error;    /* why it failed, or NULL */
    char *log_path; /* the build's log on the node that built it */
};
void eph_image_rec_release(struct eph_image_rec *r);
typedef int (*eph_image_cb)(const struct eph_image_rec *r, void *ctx);

/* A webhook endpoint (docs/WEBHOOKS.md). secret_sealed is the signing secret sealed by the
 * caller (common/secret.h) and hex-encoded: the store never holds it in the clear; listings leave
 * it NULL. */
struct eph_webhook {
    char id[40]; /* wh_... */
    char org_id[48];
    char *url;
    json_t *events; /* array of event types */
    char *secret_sealed;
    unsigned timeout_seconds;
    int64_t created_at_ms;
};
void eph_webhook_release(struct eph_webhook *w);
/* The most endpoints an org may have (the API refuses more; a listing shows no more). */
#define EPH_WEBHOOKS_PER_ORG 16
typedef int (*eph_webhook_cb)(const struct eph_webhook *w, void *ctx);

/* One event's delivery to one endpoint, as the log shows it; a claim also fills what sending it
 * needs (body, url, secret_sealed, timeout_seconds; NULL and 0 otherwise). */
struct eph_webhook_delivery {
    char event_id[40];
    char webhook_id[40];
    char type[40];
    char state[12]; /* pending | delivered | failed */
    unsigned attempts;
    int64_t created_at_ms;
    int64_t next_attempt_at_ms;
    int64_t last_attempt_at_ms; /* 0: not yet */
    int last_status;            /* the last answer's HTTP status; 0: none */
    int64_t last_duration_ms;
    char *last_error; /* NULL: none */
    char *body;
    char *url;
    char *secret_sealed;
    unsigned timeout_seconds;
};
void eph_webhook_delivery_release(struct eph_webhook_delivery *d);
typedef int (*eph_delivery_cb)(const struct eph_webhook_delivery *d, void *ctx);

/* The outcome of one attempt, as webhook_record writes it. */
struct eph_webhook_attempt {
    const char *event_id;
    const char *webhook_id;
    const char *node_id; /* the claimer */
    const char *state;   /* pending (retried at next_attempt_at_ms), delivered, failed */
    int64_t at_ms;
    int64_t next_attempt_at_ms; /* pending only */
    int status;                 /* HTTP status, 0: no answer */
    int64_t duration_ms;
    const char *error; /* NULL: none */
};

/* One attempt as the history keeps it (webhook_attempts): its number (1 is the first), when,
 * its outcome (delivered, retried: another is to come, failed: given up), the answer's HTTP
 * status (0: none), how long it took and why it failed (empty: it did not). */
struct eph_webhook_attempt_row {
    unsigned attempt;
    char outcome[12];
    int64_t at_ms;
    int status;
    int64_t duration_ms;
    char error[200];
};
/* The most attempts of one delivery the history shows (the newest; a day of retries is ~35). */
#define EPH_WEBHOOK_ATTEMPTS_MAX 100
typedef int (*eph_attempt_cb)(const struct eph_webhook_attempt_row *a, void *ctx);

/* What a shared store tells every node (PostgreSQL: LISTEN/NOTIFY), called from the store's own
 * listening thread, quick and without calling back into the listener. */
struct eph_store_listener {
    /* An event was committed (any node): its run, number and type. */
    void (*event)(const char *run_id, uint64_t seq, const char *type, void *ctx);
    /* A run was queued (any node). */
    void (*queued)(const char *run_id, void *ctx);
    /* A cancel was asked on some node. */
    void (*cancel)(const char *run_id, void *ctx);
    /* Notifications may have been missed (the connection was lost and is back): look again. */
    void (*resync)(void *ctx);
    void *ctx;
};

/* What run_claim_next may claim: a run no node holds (on a shared store, not zero-data-retention:
 * its prompt lives on the node that took it), or one of waiting (the runs queued in this node's
 * own queue: its zero-data-retention runs) that no other node holds. */
struct eph_claim_next {
    const char *node_id;
    int64_t lease_until_ms;
    unsigned max_per_org;       /* 0: no cap */
    int64_t started_at_ms;      /* > 0: the claim starts it too (queued -> starting, started_at) */
    const char *const *waiting; /* run ids; NULL when nwaiting is 0 */
    size_t nwaiting;
};

typedef int (*eph_event_cb)(const struct eph_event *e, void *ctx);
typedef int (*eph_run_cb)(const struct eph_run *r, void *ctx);
typedef int (*eph_key_cb)(const struct eph_key_info *k, void *ctx);
typedef int (*eph_conn_cb)(const struct eph_connection *c, void *ctx);
typedef int (*eph_status_count_cb)(const char *status, uint64_t count, void *ctx);

struct eph_store_ops {
    const char *name;
    bool shared; /* several nodes may use the same database */
    int (*open)(const char *target, struct eph_store **out, char *err, size_t errlen);
    void (*close)(struct eph_store *s);
    int (*ping)(struct eph_store *s);
    /* Whether the store takes writes, as cheaply as it can tell (readiness): 0, or the error of
     * the writes that fail with why (what failed, and since when). NULL: ping is all it knows. */
    int (*writable)(struct eph_store *s, char *why, size_t whylen);

    /* Organizations and keys. */
    int (*org_ensure)(struct eph_store *s, const char *name, int64_t initial_credit, char *org_id,
                      size_t idlen, bool *created);
    int (*org_find)(struct eph_store *s, const char *name, char *org_id, size_t idlen);
    int (*credit_add)(struct eph_store *s, const char *org_id, int64_t micros);
    /* prefix: the key's first characters, kept so that a listing can show which key is which. */
    int (*key_insert)(struct eph_store *s, const char *org_id, const char *key_hash,
                      const char *role, const char *prefix, char *key_id, size_t idlen);
    /* Finds a live key by its SHA-256 hex. */
    int (*key_lookup)(struct eph_store *s, const char *key_hash, char *org_id, size_t idlen,
                      char *role, size_t rolelen);
    int (*balance)(struct eph_store *s, const char *org_id, struct eph_balance *out);
    /* The org's keys that are not revoked, oldest first. */
    int (*key_list)(struct eph_store *s, const char *org_id, eph_key_cb cb, void *ctx);
    /* Revokes a key of the org: -ENOENT when there is no such live key in that org. */
    int (*key_revoke)(struct eph_store *s, const char *org_id, const char *key_id, int64_t now_ms);

    /* Connections, by org and unique name. insert: -EEXIST when the name is taken. */
    int (*conn_insert)(struct eph_store *s, const char *org_id, const struct eph_connection *c,
                       char *conn_id, size_t idlen);
    int (*conn_list)(struct eph_store *s, const char *org_id, eph_conn_cb cb, void *ctx);
    /* -ENOENT when the org has no connection of that name. */
    int (*conn_get)(struct eph_store *s, const char *org_id, const char *name,
                    struct eph_connection *out);
    /* Deletes by name or id; the sealed credential is overwritten (secure_delete). */
    int (*conn_delete)(struct eph_store *s, const char *org_id, const char *name_or_id);

    /* Images. insert: -EEXIST when the org (or the operator: "") has one of that name. get:
     * the org's own, else the operator's (org_id "": the operator's only). list: both, by name.
     * update: status, digest, size, error and log of the record created at r->created_at_ms
     * (-ENOENT when it was deleted, or replaced by another of that name, meanwhile). delete: -EBUSY
     * while a run that is not finished names it (any org's, for an operator's image). */
    int (*image_insert)(struct eph_store *s, const struct eph_image_rec *r);
    int (*image_update)(struct eph_store *s, const struct eph_image_rec *r);
    int (*image_get)(struct eph_store *s, const char *org_id, const char *name,
                     struct eph_image_rec *out);
    int (*image_list)(struct eph_store *s, const char *org_id, eph_image_cb cb, void *ctx);
    int (*image_delete)(struct eph_store *s, const char *org_id, const char *name);
    /* Runs. run_insert reserves max_cost in the same transaction (-EDQUOT when the available
     * balance is short) and appends the first event. */
    int (*run_insert)(struct eph_store *s, const struct eph_run *r, const struct eph_event *first);
    /* The same, refused with -EAGAIN (and nothing written) when the org already has max_queued
     * queued runs; the count and the insert are one transaction. max_queued 0: no limit. */
    int (*run_insert_capped)(struct eph_store *s, const struct eph_run *r,
                             const struct eph_event *first, unsigned max_queued);
    int (*runs_count_queued)(struct eph_store *s, const char *org_id, unsigned *out);
    /* Runs per status over every org (metrics). */
    int (*runs_count_by_status)(struct eph_store *s, eph_status_count_cb cb, void *ctx);
    /* org_id NULL: any org (internal use). -ENOENT for a run of another org. */
    int (*run_get)(struct eph_store *s, const char *id, const char *org_id, struct eph_run *out);
    /* Newest first, of one kind (runs or sandboxes); after = cursor run id or NULL; status NULL =
     * any; metadata NULL = any, else an object of strings every pair of which the run's metadata
     * must hold. */
    int (*run_list)(struct eph_store *s, const char *org_id, unsigned limit, const char *after,
                    const char *status, const json_t *metadata, enum eph_run_kind kind,
                    eph_run_cb cb, void *ctx, bool *has_more);
    /* Non-terminal state changes (starting, running) with their fields. */
    int (*run_update)(struct eph_store *s, const struct eph_run *r);
    /* Progress of the money measured so far (so that a crash settles what was measured). */
    int (*run_progress)(struct eph_store *s, const struct eph_run *r);
    /* The terminal transaction: status, ledger charge + release, closing events. -EALREADY when
     * the run was already terminal (nothing written). */
    int (*run_finish)(struct eph_store *s, const struct eph_run_final *f);
    /* Leases. A node claims a queued run before working on it (-EALREADY when it is not queued
     * or another node holds it), renews the lease while it works, and the renewal records compute
     * measured so far (the checkpoint a lost run is charged to, never lowered, capped at what the
     * reservation leaves). renew: -ESTALE when the run is no longer this node's to work on. */
    int (*run_claim)(struct eph_store *s, const char *run_id, const char *node_id,
                     int64_t lease_until_ms);
    int (*run_renew)(struct eph_store *s, const char *run_id, const char *node_id,
                     int64_t lease_until_ms, int64_t compute_micros);
    /* run_claim and queued -> starting with started_at, in one statement (the worker's claim:
     * docs/STORE.md, "A step, one commit"); -EALREADY as run_claim, nothing written. */
    int (*run_claim_start)(struct eph_store *s, const char *run_id, const char *node_id,
                           int64_t lease_until_ms, int64_t started_at_ms);
    /* Claims the next queued run by the fair rule of docs/STORE.md: of the orgs with a run this
     * node may claim and fewer than max_per_org claimed runs (0: no cap), the org with the fewest
     * claimed runs (queued with a node, starting, running; every node), ties to the oldest; and
     * its oldest such run. The choice and the claim are one statement; a shared store skips rows
     * another node is claiming (FOR UPDATE SKIP LOCKED). -ENOENT when there is none. */
    int (*run_claim_next)(struct eph_store *s, const struct eph_claim_next *q, char *run_id,
                          size_t idlen);
    /* Non-terminal claimed runs whose lease ended before now_ms (any node), oldest first. */
    int (*runs_lease_expired)(struct eph_store *s, int64_t now_ms, eph_run_cb cb, void *ctx);
    /* Runs in a given state (all orgs), oldest first. */
    int (*runs_in_state)(struct eph_store *s, enum eph_run_status st, eph_run_cb cb, void *ctx);
    /* A run's outputs (output_record.h), written once when the worker collected them: put
     * replaces what the run had. list: every output of the run without its content, by path.
     * get: one output with its content; -ENOENT when the run has no such output (or was
     * purged). Never used for a zero-data-retention run (the live entry holds those). */
    int (*run_outputs_put)(struct eph_store *s, const char *run_id, const struct eph_outputs *o);
    int (*run_outputs_list)(struct eph_store *s, const char *run_id, struct eph_outputs *out);
    int (*run_output_get)(struct eph_store *s, const char *run_id, const char *path,
                          struct eph_output *out);
    /* Drops the log (prompt, files, event outputs, result, the run's outputs) of runs finished
     * before cutoff. */
    int (*purge_logs)(struct eph_store *s, int64_t now_ms, unsigned *purged);

    /* Webhooks (docs/WEBHOOKS.md). list: the org's endpoints, oldest first; get: one (-ENOENT
     * when the org has none of that id); delete: the endpoint is disabled, its sealed secret
     * dropped and its pending deliveries failed (-ENOENT as get). deliveries: the endpoint's
     * newest deliveries first, at most limit, those older than the delivery of event after (NULL:
     * from the newest; an event the endpoint has none of: none), *has_more set when more follow.
     * delivery_get: one delivery (-ENOENT when the endpoint has none of that event); attempts:
     * its attempts, oldest first, the last limit of them. claim: at most max pending deliveries due
     * at now_ms that no claim holds, claimed by node_id until claim_until_ms and passed to cb (a
     * shared store: FOR UPDATE SKIP LOCKED, so each is claimed by one node). record: one
     * attempt's outcome, the claim released and the attempt added to the history in the same
     * transaction; -ESTALE when node_id no longer holds the claim. A
     * delivery's body is dropped once it is delivered or failed. */
    int (*webhook_insert)(struct eph_store *s, const struct eph_webhook *w);
    int (*webhook_list)(struct eph_store *s, const char *org_id, eph_webhook_cb cb, void *ctx);
    int (*webhook_get)(struct eph_store *s, const char *org_id, const char *id,
                       struct eph_webhook *out);
    int (*webhook_delete)(struct eph_store *s, const char *org_id, const char *id, int64_t now_ms);
    int (*webhook_deliveries)(struct eph_store *s, const char *org_id, const char *webhook_id,
                              unsigned limit, const char *after, eph_delivery_cb cb, void *ctx,
                              bool *has_more);
    int (*webhook_delivery_get)(struct eph_store *s, const char *org_id, const char *webhook_id,
                                const char *event_id, struct eph_webhook_delivery *out);
    int (*webhook_attempts)(struct eph_store *s, const char *org_id, const char *webhook_id,
                            const char *event_id, unsigned limit, eph_attempt_cb cb, void *ctx);
    int (*webhook_claim)(struct eph_store *s, const char *node_id, int64_t now_ms,
                         int64_t claim_until_ms, unsigned max, eph_delivery_cb cb, void *ctx);
    int (*webhook_record)(struct eph_store *s, const struct eph_webhook_attempt *a);

    /* One step's writes in one transaction (docs/STORE.md, "A step, one commit"): with
     * EPH_STEP_STATE the run's non-terminal state as run_update writes it, with
     * EPH_STEP_PROGRESS its usage and cost as run_progress writes them, then events[0..n) (n
     * may be 0) as event_append appends them, all of r->id; all or nothing. -EALREADY as
     * run_update, -ESTALE as event_append: nothing is written. */
    int (*run_step)(struct eph_store *s, const struct eph_run *r, unsigned what,
                    const struct eph_event *events, size_t n);

    /* Events. append: -ESTALE on a shared store when the run is already finished (the fence of
     * a node whose run another node settled as lost: docs/STORE.md). */
    int (*event_append)(struct eph_store *s, const char *run_id, const struct eph_event *e);
    int (*events_list)(struct eph_store *s, const char *run_id, uint64_t after_seq, unsigned limit,
                       eph_event_cb cb, void *ctx);

    /* Idempotency (Stripe semantics). begin: -EEXIST with *existing filled when the key exists;
     * a record created before expired_before_ms counts as absent and is replaced. pending (or
     * NULL) is kept as the record's body while it is in flight: for a create, the answer it will
     * give, {"object":"run","id":"run_…"} with the run's id chosen before the run is stored, so
     * that a record whose answer could not be written is completed from its run. */
    int (*idem_begin)(struct eph_store *s, const char *org_id, const char *key,
                      const char *request_hash, const char *pending, int64_t now_ms,
                      int64_t expired_before_ms, struct eph_idem *existing);
    int (*idem_complete)(struct eph_store *s, const char *org_id, const char *key, int status_code,
                         const char *body);
    int (*idem_abandon)(struct eph_store *s, const char *org_id, const char *key);
    int (*idem_expire)(struct eph_store *s, int64_t cutoff_ms);
    /* Records in flight that name a run (their pending body): those whose run was stored are
     * completed as its 201; those whose run was not, created before stale_before_ms, are
     * dropped (the request ended without storing it). Counts in *completed and *dropped. */
    int (*idem_recover)(struct eph_store *s, int64_t stale_before_ms, unsigned *completed,
                        unsigned *dropped);

    /* Shared stores only (NULL otherwise): notifications between nodes. listen starts them
     * (the listener must outlive the store's close, which stops them); notify_cancel tells every
     * node that a run's cancel was asked. */
    int (*listen)(struct eph_store *s, const struct eph_store_listener *l);
    int (*notify_cancel)(struct eph_store *s, const char *run_id);

    /* Nodes (docs/DEPLOY.md): the URL at which the other nodes reach a node's API, written by
     * the node when it starts (replacing what it wrote before). node_url: -ENOENT for a node
     * that never wrote one, -ENAMETOOLONG when it does not fit in len. */
    int (*node_put)(struct eph_store *s, const char *node_id, const char *url, int64_t now_ms);
    int (*node_url)(struct eph_store *s, const char *node_id, char *url, size_t len);

    /* Sum of every ledger entry of an org by kind, for audits and tests. */
    int (*ledger_totals)(struct eph_store *s, const char *org_id, int64_t *credits,
                         int64_t *reserves, int64_t *charges, int64_t *releases);
};

/* What run_step writes besides its events. */
#define EPH_STEP_STATE 1u
#define EPH_STEP_PROGRESS 2u

struct eph_store {
    const struct eph_store_ops *ops;
};

extern const struct eph_store_ops eph_store_sqlite_ops;
extern const struct eph_store_ops eph_store_postgres_ops;

/* Opens the store named by target: a PostgreSQL URI ("postgres://user@host:port/db", libpq's
 * syntax, optionally "?pool_size=N") or a SQLite path. */
int eph_store_open(const char *target, struct eph_store **out, char *err, size_t errlen);
/* The same with the PostgreSQL pool size from the configuration (ignored for SQLite). */
int eph_store_open_pool(const char *target, unsigned pool_size, struct eph_store **out, char *err,
                        size_t errlen);
bool eph_store_target_is_postgres(const char *target);
/* The store's part of a health report (/healthz): 0 when the database answers now, else a
 * negative errno and a short reason (no credentials, no host details). */
int eph_store_health(struct eph_store *s, char *reason, size_t len);
/* Round trips to PostgreSQL since open, the listener's aside: each statement, each prepare, each
 * batch (/metrics: ephemeral_store_round_trips_total; the bench's round trips per run). */
unsigned long eph_store_postgres_round_trips(struct eph_store *s);
/* The TCP addresses of the PostgreSQL servers a target names (host or hostaddr, each with its
 * port, PGHOST and PGPORT when the target has none, 5432 by default), resolved now: at most max
 * into out, their number returned; 0 for a Unix socket, a SQLite path or a target libpq cannot
 * parse. The broker refuses to reach them (docs/BROKER.md). */
size_t eph_store_postgres_servers(const char *target, struct sockaddr_storage *out, size_t max);
/* Calls waiting for a pooled connection now: the lease keeper's (urgent, served first) and the
 * others (for the tests). */
void eph_store_postgres_waiters(struct eph_store *s, unsigned *ordinary, unsigned *urgent);

#endif
