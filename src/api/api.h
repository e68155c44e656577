/*
 * api.h - the HTTP API (docs/API.md) on libmicrohttpd.
 *
 * The server polls its sockets with a small pool of threads (epoll where available). Handlers
 * never block on a run: a request that waits (a Prefer: wait long poll, a cancel waiting for the
 * settlement, an idle event stream) parks its connection with MHD_suspend_connection() and is
 * resumed by park.c when its run changes or its deadline passes, so a thousand idle streams cost
 * a thousand small structs, not a thousand threads. Request bodies are capped (413 past
 * max_body_bytes) and every failed answer has the error shape of docs/API.md ("Errors").
 */
#ifndef EPH_API_H
#define EPH_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/buf.h"
#include "api/validate.h"
#include "common/id.h"
#include "run/drive.h"
#include "run/service.h"

struct eph_api;
struct eph_api_guard;
struct eph_live;
struct eph_live_registry;
struct MHD_Connection;

/* Starts listening on cfg->listen ("ADDR:PORT", loopback by default). */
int eph_api_start(struct eph_service *svc, struct eph_api **out, char *err, size_t errlen);
/* Resumes every parked request (they answer at once), then stops the server. */
void eph_api_stop(struct eph_api *api);
/* The port the server listens on: the one cfg->listen named, or the one the kernel chose when
 * it named port 0 (tests start a server on a free loopback port that way). 0 if unknown. */
uint16_t eph_api_port(struct eph_api *api);

/* ---- parking (park.c) ---- */

/* A connection parked until its run has an event after after_seq (UINT64_MAX: until the run is
 * settled), the run is settled, or deadline_ns (CLOCK_MONOTONIC) passes. */
struct eph_api_waiter {
    struct MHD_Connection *conn;
    struct eph_live *live; /* borrowed: the parker holds a reference until it is resumed */
    uint64_t after_seq;
    uint64_t deadline_ns;
    /* Optional: also ready once done(done_arg) holds (a sandbox's call, run/drive.h; its thread
     * pokes the live entry when it is done). */
    bool (*done)(const void *done_arg);
    const void *done_arg;
    struct eph_api_waiter *next;
};

enum eph_api_park_result {
    EPH_API_PARKED,   /* suspended: MHD calls the handler (or the content reader) again later */
    EPH_API_READY,    /* the condition holds or the deadline passed: go on without waiting */
    EPH_API_STOPPING, /* the server is stopping: answer now */
};

/* The parker: one per API server, woken by live's observer hook. start allocates it and starts
 * its thread; stop resumes every parked connection and refuses to park any more (requests still
 * being handled may call eph_api_park until the HTTP daemon is stopped); free stops it if needed
 * and frees it, once no request can reach it. */
struct eph_api_parker;
int eph_api_park_start(struct eph_live_registry *live, struct eph_api_parker **out)
    __attribute__((warn_unused_result));
void eph_api_park_stop(struct eph_api_parker *p);
void eph_api_park_free(struct eph_api_parker *p);
/* Parks w->conn. Call only from MHD's access handler or content reader of that connection. */
enum eph_api_park_result eph_api_park(struct eph_api_parker *p, struct eph_api_waiter *w);
/* Parked connections (tests and metrics). */
unsigned eph_api_parked_count(struct eph_api_parker *p);

/* Calls for a sandbox another node serves, sent on to it (forward.c): one forwarder per API
 * server. stop ends every transfer and waits for their threads (before MHD is stopped: it
 * resumes the connections they hold); free stops it if needed. */
struct eph_api_forwarder;
struct eph_api_forward;
int eph_api_forwarder_new(struct eph_api_forwarder **out);
void eph_api_forwarder_stop(struct eph_api_forwarder *f);
void eph_api_forwarder_free(struct eph_api_forwarder *f);
/* Calls being sent on now (metrics). */
unsigned eph_api_forwarded_count(struct eph_api_forwarder *f);

/* ---- for the resource files ---- */

struct eph_api_req {
    struct eph_service *svc;
    struct eph_api_parker *parker;       /* the server's */
    struct eph_api_forwarder *forwarder; /* the server's; NULL: calls are not sent on */
    struct eph_api_guard *guard;         /* the server's (api/guard.h); NULL in tests without one */
    struct MHD_Connection *conn;
    const char *method;
    const char *path;  /* without the query string */
    const char *route; /* the route's pattern, for metrics */
    struct eph_buf body;
    bool body_too_large;
    bool answered;
    bool authenticated;   /* at the head, before the body was read */
    unsigned retry_after; /* seconds for a 429's or 503's Retry-After; 0: the default */
    unsigned status;      /* the status answered */
    uint64_t start_ns;
    char org_id[48];
    char role[16];
    char request_id[24]; /* "req_" + 16 hex: in the Request-Id header, every error and log line */
    struct eph_api_query query; /* the validated query arguments of the route */

    /* Idempotency (docs/API.md), handled by the server for the POSTs that honour it: set while the
     * request holds a new key, so that its answer is stored (2xx) or the key released. */
    bool idem_active;
    char idem_key[256];
    /* A create holding its key is listed in the server's inflight set from just before its
     * record is written until its answer is: on a store of one node, a record in flight that
     * no listed request holds is known to be left over (reply.c). */
    struct eph_api_inflight *inflight; /* the server's; NULL: not known (time bound only) */
    struct eph_api_req *in_prev, *in_next;
    bool in_listed;

    /* A parked request: when its connection is resumed, the server calls resume instead of
     * routing again. live is a reference held while parked, released when the request ends. */
    bool parked;
    int (*resume)(struct eph_api_req *req);
    struct eph_live *live;
    char run_id[EPH_RUN_ID_LEN + 1];
    struct eph_api_waiter waiter;
    /* A sandbox's call this request waits for or streams (a reference, released when the
     * request ends; run/drive.h). */
    struct eph_drive_op *op;
    void *stream;                    /* a command's event stream (sandboxes.c) */
    struct eph_api_forward *forward; /* a call sent on to another node, released at the end */
};

/* Sends req on to the node named node, whose API is at base_url, and answers with what it
 * answers (parked meanwhile; req->run_id names the sandbox). 503 node_unavailable when it cannot
 * be reached or too many calls are on their way. */
int eph_api_forward(struct eph_api_req *req, const char *base_url, const char *node);
/* This node's URL for the others (docs/DEPLOY.md): configured (node_url, checked: http(s), a
 * host and a port, no user, path, query or fragment; -EINVAL with err), else http:// and the
 * listening address with the port listened on, host_name for a wildcard address. */
int eph_api_node_url(const char *configured, const char *listen, uint16_t port,
                     const char *host_name, char *out, size_t len, char *err, size_t errlen);
/* The request is over: the transfer ends if it still runs. */
void eph_api_forward_release(struct eph_api_forward *fw);

/* Answers with a JSON body (steals body). extra_header/value may be NULL. */
int eph_api_reply_json(struct eph_api_req *req, unsigned status, json_t *body,
                       const char *extra_header, const char *extra_value);
/* Answers with a JSON body already serialised (steals text, which ends with a newline). */
int eph_api_reply_json_text(struct eph_api_req *req, unsigned status, char *text);
/* Answers with a body of another type (copies text). */
int eph_api_reply_text(struct eph_api_req *req, unsigned status, const char *content_type,
                       const char *text, size_t len);
/* 200 with bytes of a run's output (steals data, which may be NULL when len is 0): the type,
 * nosniff, a sandboxing CSP, and disposition (may be NULL: shown inline). */
int eph_api_reply_bytes(struct eph_api_req *req, const char *content_type, unsigned char *data,
                        size_t len, const char *disposition);
/* Answers with the error shape; param may be NULL. */
/* 503 store_unavailable, the answer to any store failure a handler cannot say more about. */
int eph_api_reply_store_unavailable(struct eph_api_req *req);
/* {"object":"list","data":data,"has_more":...}, 200; steals data. */
int eph_api_reply_list(struct eph_api_req *req, json_t *data, bool has_more);
int eph_api_reply_error(struct eph_api_req *req, unsigned status, const char *type,
                        const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* 403 unless the key is an admin's; true when it is. */
bool eph_api_require_admin(struct eph_api_req *req);
/* Stores the answer of an idempotent request now (before a long poll) instead of when the
 * request is answered. */
void eph_api_idem_settle(struct eph_api_req *req, unsigned status, json_t *body);
/* docs/API.md "Idempotency" for a POST that carries Idempotency-Key (the server, before the
 * handler): true when the request was answered (a replay, 409, 422, or a bad key), false when the
 * handler should run, holding the key. */
bool eph_api_idem_gate(struct eph_api_req *req);
/* At start-up, before the server listens: the idempotency records in flight whose answer was
 * never written are completed from the run each created, or released when it created none
 * (store.h, idem_recover); logged, never fatal. */
void eph_api_idem_recover(struct eph_service *svc);
/* The set of creates holding their idempotency key in this process (one per server). */
struct eph_api_inflight;
int eph_api_inflight_new(struct eph_api_inflight **out) __attribute__((warn_unused_result));
void eph_api_inflight_free(struct eph_api_inflight *f);
/* Records the answer of a request that holds a key (text NULL or a failure: the key is let go). */
void eph_api_idem_finish(struct eph_api_req *req, unsigned status, const char *text);
/* Checks the bearer key; answers 401 and returns false when it is missing or unknown. */
bool eph_api_authenticate(struct eph_api_req *req);
/* A request header, or NULL. The query arguments are validated into req->query. */
const char *eph_api_header(struct eph_api_req *req, const char *name);
/* Prefer: wait=N into *wait (0 when absent); answers 400 and returns false when the header's wait
 * is not an integer from 0 to max. */
bool eph_api_prefer_wait(struct eph_api_req *req, unsigned max, unsigned *wait);
/* Answers a refusal described by the validation functions (validate.h). */
int eph_api_reply_invalid(struct eph_api_req *req, const struct eph_api_error *e);
/* Request-Id on every answer; Retry-After on 429 and 503. For handlers that build their own
 * MHD response (event streams). */
struct MHD_Response;
void eph_api_add_common_headers(struct eph_api_req *req, struct MHD_Response *resp,
                                unsigned status);
/* Seconds a client is told to wait after a 429 or a 503. */
#define EPH_API_RETRY_AFTER_SECONDS "1"
/* Parks req until its run (req->live, taken by the caller) settles or deadline_ns passes; then the
 * server calls resume. False when it did not park (answer now). */
bool eph_api_park_until_settled(struct eph_api_req *req, uint64_t deadline_ns,
                                int (*resume)(struct eph_api_req *req));
/* Parses the body as a JSON object; answers 400 and returns NULL when it is not one. */
json_t *eph_api_body_object(struct eph_api_req *req);

/* Resource handlers (runs.c, account.c, keys.c, connections.c). Each answers the request. */
int eph_api_runs_create(struct eph_api_req *req);
int eph_api_runs_get(struct eph_api_req *req, const char *id);
int eph_api_runs_list(struct eph_api_req *req);
int eph_api_runs_events(struct eph_api_req *req, const char *id);
int eph_api_runs_cancel(struct eph_api_req *req, const char *id);
/* Shared by runs and sandboxes (runs.c): a row of kind of this org, or 404/503 answered (false);
 * the timeline of one (JSON or Server-Sent Events); a create's connections exist (else 400
 * answered); the image a create names (runs.c, image_resolve). */
bool eph_api_load_kind(struct eph_api_req *req, const char *id, enum eph_run_kind kind,
                       struct eph_run *r);
int eph_api_events(struct eph_api_req *req, const char *id, enum eph_run_kind kind);
bool eph_api_connections_exist(struct eph_api_req *req, json_t *conns);
bool eph_api_image_resolve(struct eph_api_req *req, const struct eph_api_create *c,
                           const struct eph_run *orig, char name[64], char digest[72]);
/* A sandbox's command as Server-Sent Events (runs.c): its output events after after_seq as they
 * come (stdout, stderr), then exit with result(op) once it is done. */
int eph_api_command_stream(struct eph_api_req *req, const char *sandbox_id, uint64_t after_seq,
                           struct eph_drive_op *op,
                           json_t *(*result)(const struct eph_drive_op *op));
/* 503 shutting_down or not_ready for a create the server cannot take now (runs.c); true when it
 * answered. */
bool eph_api_refuse_unready(struct eph_api_req *req);
/* The start of a create (runs.c): the server can take it, Prefer: wait into *wait, the body
 * validated by validate into c (release both after). False when it answered. */
bool eph_api_create_begin(struct eph_api_req *req,
                          int (*validate)(json_t *body, const struct eph_config *cfg,
                                          struct eph_api_create *c, struct eph_api_error *e),
                          unsigned *wait, json_t **body, struct eph_api_create *c);
/* The first event of a new run or sandbox (runs.c): "budget of $X reserved", serialised as
 * stored. first was zeroed; 0 or -ENOMEM. */
int eph_api_first_event(struct eph_event *first, const char *source, const char *type,
                        int64_t at_ms, int64_t reserved);
/* The answer to a create the store refused (runs.c): 402 insufficient_balance (-EDQUOT), 429
 * too_many_queued_runs (-EAGAIN), else 503. */
int eph_api_store_refused(struct eph_api_req *req, int rc, int64_t max_cost);
/* /v1/sandboxes (sandboxes.c). */
int eph_api_sandboxes_create(struct eph_api_req *req);
int eph_api_sandboxes_list(struct eph_api_req *req);
int eph_api_sandboxes_get(struct eph_api_req *req, const char *id);
int eph_api_sandboxes_delete(struct eph_api_req *req, const char *id);
/* Everything under /v1/sandboxes/{id}/: events, commands, files (sandboxes.c routes the tail). */
int eph_api_sandboxes_sub(struct eph_api_req *req, const char *id);
/* GET /v1/runs/{id}/transcript (transcript.c). */
int eph_api_runs_transcript(struct eph_api_req *req, const char *id);
/* GET /v1/runs/{id}/outputs and /v1/runs/{id}/outputs/{path} (outputs.c). */
int eph_api_runs_outputs(struct eph_api_req *req, const char *id);
int eph_api_runs_output(struct eph_api_req *req, const char *id);
/* A create's replay_of (transcript.c): loads the original into *orig (release it after the new
 * run is stored: c borrows from it), checks the replay is possible and widens nothing, and fills
 * in c what the body left to the original (prompt, model, permissions, files, timeout). 0, or
 * an error already answered (400 with param, 404 for a run the org cannot see, 503). */
int eph_api_replay_prepare(struct eph_api_req *req, json_t *body, struct eph_api_create *c,
                           struct eph_run *orig);
int eph_api_balance(struct eph_api_req *req);
int eph_api_models_list(struct eph_api_req *req);
int eph_api_credits(struct eph_api_req *req);
int eph_api_healthz(struct eph_api_req *req);
int eph_api_metrics(struct eph_api_req *req);
int eph_api_keys_create(struct eph_api_req *req);
int eph_api_keys_list(struct eph_api_req *req);
int eph_api_keys_delete(struct eph_api_req *req, const char *id);
int eph_api_connections_create(struct eph_api_req *req);
int eph_api_connections_list(struct eph_api_req *req);
int eph_api_connections_get(struct eph_api_req *req, const char *name);
int eph_api_connections_delete(struct eph_api_req *req, const char *name);
/* /v1/images (images.c). */
int eph_api_images_create(struct eph_api_req *req);
int eph_api_images_list(struct eph_api_req *req);
int eph_api_images_get(struct eph_api_req *req, const char *name);
int eph_api_images_log(struct eph_api_req *req, const char *name);
int eph_api_images_delete(struct eph_api_req *req, const char *name);
/* /v1/webhooks (webhooks.c). */
int eph_api_webhooks_create(struct eph_api_req *req);
int eph_api_webhooks_list(struct eph_api_req *req);
int eph_api_webhooks_get(struct eph_api_req *req, const char *id);
int eph_api_webhooks_delete(struct eph_api_req *req, const char *id);
int eph_api_webhooks_deliveries(struct eph_api_req *req, const char *id);
/* GET /v1/webhooks/{id}/deliveries/{event_id}: the event's id read from req->path. */
int eph_api_webhooks_delivery(struct eph_api_req *req, const char *id);

/* Connections (connections.c), shared with `ephemerald admin connection add`: validates a
 * connection's description (name, base_url, methods, path_prefixes, headers; the caller rejects
 * other fields), and on success fills c (release with eph_connection_release) with the headers
 * sealed by the key file at key_path (created on first use). -EINVAL with the field at fault in
 * *param and why in err; another error (no usable key file) with *param NULL. */
struct eph_connection;
int eph_api_connection_build(json_t *body, const char *key_path, struct eph_connection *c,
                             const char **param, char *err, size_t errlen);
/* The same rules without sealing (c->sealed stays NULL): what the fuzz driver and unit tests
 * call. */
int eph_api_connection_check(json_t *body, struct eph_connection *c, const char **param, char *err,
                             size_t errlen);

#endif
