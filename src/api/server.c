/*
 * server.c - the HTTP server: connection handling, body accumulation with a cap, routing, auth,
 * idempotency of POSTs, metrics of every request, and the JSON answer helpers.
 */
#include "api/api.h"
#include "api/json.h"
#include "api/static.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "common/clock.h"
#include "common/id.h"
#include "common/log.h"
#include "common/metrics.h"
#include "api/validate.h"
#include "run/live.h"

struct eph_api {
    struct MHD_Daemon *mhd;
    struct eph_service *svc;
    struct eph_api_parker *parker;
};

/* Threads polling the sockets. Handlers only wait on the store (milliseconds); anything longer
 * parks its connection, so a few threads serve any number of clients. */
#define API_THREADS 4

/* JSON numbers such as event times print with at most 10 significant digits. */
#define DUMP_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(10))

const char *eph_api_header(struct eph_api_req *req, const char *name)
{
    return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

bool eph_api_prefer_wait(struct eph_api_req *req, unsigned max, unsigned *wait)
{
    struct eph_api_error e;
    if (eph_api_validate_prefer(eph_api_header(req, "Prefer"), max, wait, &e) == 0)
        return true;
    eph_api_reply_invalid(req, &e);
    return false;
}

static void idem_finish(struct eph_api_req *req, unsigned status, const char *text)
{
    if (!req->idem_active)
        return;
    req->idem_active = false;
    struct eph_store *st = req->svc->store;
    /* Only a success is remembered: a request that failed (validation, balance, a conflict) can
     * be retried with the same key. */
    int rc = status / 100 == 2 && text
                 ? st->ops->idem_complete(st, req->org_id, req->idem_key, (int)status, text)
                 : st->ops->idem_abandon(st, req->org_id, req->idem_key);
    if (rc)
        EPH_WARN("api", "cannot record an idempotency key: %s", strerror(-rc));
}

void eph_api_idem_settle(struct eph_api_req *req, unsigned status, json_t *body)
{
    if (!req->idem_active)
        return;
    char *text = json_dumps(body, DUMP_FLAGS);
    idem_finish(req, status, text);
    free(text);
}

void eph_api_add_common_headers(struct eph_api_req *req, struct MHD_Response *resp, unsigned status)
{
    MHD_add_response_header(resp, "Request-Id", req->request_id);
    /* A 429 (too many queued runs) or a 503 (the store, a queue, a shutdown) passes: say when to
     * look again rather than let clients retry in a tight loop. */
    if (status == 429 || status == 503)
        MHD_add_response_header(resp, "Retry-After", EPH_API_RETRY_AFTER_SECONDS);
}

static int queue_response(struct eph_api_req *req, unsigned status, char *text, size_t len,
                          const char *content_type, const char *extra_header,
                          const char *extra_value)
{
    struct MHD_Response *resp =
        text ? MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE)
             : MHD_create_response_from_buffer(0, (char *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", content_type);
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    eph_api_add_common_headers(req, resp, status);
    if (extra_header && extra_value)
        MHD_add_response_header(resp, extra_header, extra_value);
    int rc = MHD_queue_response(req->conn, status, resp);
    MHD_destroy_response(resp);
    req->answered = true;
    req->status = status;
    return rc;
}

static int queue(struct eph_api_req *req, unsigned status, char *text, const char *extra_header,
                 const char *extra_value)
{
    idem_finish(req, status, text);
    return queue_response(req, status, text, text ? strlen(text) : 0, "application/json",
                          extra_header, extra_value);
}

int eph_api_reply_json_text(struct eph_api_req *req, unsigned status, char *text)
{
    return queue(req, status, text, NULL, NULL);
}

int eph_api_reply_text(struct eph_api_req *req, unsigned status, const char *content_type,
                       const char *text, size_t len)
{
    char *copy = malloc(len + 1);
    if (!copy)
        return MHD_NO;
    memcpy(copy, text, len);
    copy[len] = '\0';
    idem_finish(req, status, NULL);
    return queue_response(req, status, copy, len, content_type, NULL, NULL);
}

bool eph_api_require_admin(struct eph_api_req *req)
{
    if (strcmp(req->role, "admin") == 0)
        return true;
    eph_api_reply_error(req, 403, "permission_error", "admin_required", NULL,
                        "this endpoint needs an admin key");
    return false;
}

json_t *eph_api_body_object(struct eph_api_req *req)
{
    json_error_t je;
    /* NUL is let through so that the field holding it can be named; every string field checks
     * for it. */
    json_t *body = json_loadb(req->body.data ? req->body.data : "", req->body.len,
                              JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!body || !json_is_object(body)) {
        eph_api_reply_error(req, 400, "invalid_request_error", "invalid_json", NULL,
                            "the body must be a JSON object: %s", body ? "not an object" : je.text);
        json_decref(body);
        return NULL;
    }
    return body;
}

bool eph_api_park_until_settled(struct eph_api_req *req, uint64_t deadline_ns,
                                int (*resume)(struct eph_api_req *req))
{
    if (!req->live)
        return false;
    req->waiter.conn = req->conn;
    req->waiter.live = req->live;
    req->waiter.after_seq = UINT64_MAX;
    req->waiter.deadline_ns = deadline_ns;
    if (eph_api_park(req->parker, &req->waiter) != EPH_API_PARKED)
        return false;
    req->parked = true;
    req->resume = resume;
    return true;
}

int eph_api_reply_json(struct eph_api_req *req, unsigned status, json_t *body,
                       const char *extra_header, const char *extra_value)
{
    char *text = body ? json_dumps(body, DUMP_FLAGS) : NULL;
    json_decref(body);
    if (text) {
        /* A trailing newline makes curl output readable; JSON does not mind. */
        size_t n = strlen(text);
        char *t = realloc(text, n + 2);
        if (t) {
            t[n] = '\n';
            t[n + 1] = '\0';
            text = t;
        }
    }
    return queue(req, status, text, extra_header, extra_value);
}

int eph_api_reply_error(struct eph_api_req *req, unsigned status, const char *type,
                        const char *code, const char *param, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    json_t *err = json_pack("{s:s, s:s, s:s, s:s}", "type", type, "code", code, "message", msg,
                            "request_id", req->request_id);
    if (param && *param)
        json_object_set_new(err, "param", json_string(param));
    return eph_api_reply_json(req, status, json_pack("{s:o}", "error", err), NULL, NULL);
}

int eph_api_reply_invalid(struct eph_api_req *req, const struct eph_api_error *e)
{
    return eph_api_reply_error(req, e->status, e->type, e->code, e->param, "%s", e->message);
}

int eph_api_reply_store_unavailable(struct eph_api_req *req)
{
    return eph_api_reply_error(req, 503, "api_error", "store_unavailable", NULL,
                               "the store is unavailable");
}

int eph_api_reply_list(struct eph_api_req *req, json_t *data, bool has_more)
{
    return eph_api_reply_json(
        req, 200,
        json_pack("{s:s, s:o, s:b}", "object", "list", "data", data, "has_more", has_more), NULL,
        NULL);
}

bool eph_api_authenticate(struct eph_api_req *req)
{
    const char *h = eph_api_header(req, "Authorization");
    if (!h) {
        eph_api_reply_error(req, 401, "authentication_error", "missing_api_key", NULL,
                            "missing api key: send 'Authorization: Bearer <key>'");
        return false;
    }
    if (strncasecmp(h, "Bearer ", 7) != 0 || !eph_id_is_api_key(h + 7)) {
        eph_api_reply_error(req, 401, "authentication_error", "invalid_api_key", NULL,
                            "invalid api key");
        return false;
    }
    char hash[65];
    eph_sha256_hex(h + 7, strlen(h + 7), hash);
    struct eph_store *st = req->svc->store;
    int rc = st->ops->key_lookup(st, hash, req->org_id, sizeof(req->org_id), req->role,
                                 sizeof(req->role));
    if (rc == -ENOENT) {
        eph_api_reply_error(req, 401, "authentication_error", "invalid_api_key", NULL,
                            "invalid api key");
        return false;
    }
    if (rc) {
        eph_api_reply_store_unavailable(req);
        return false;
    }
    return true;
}

/* "<prefix><id>[/<tail>]": copies the id and points tail at what follows (or ""). */
static bool match_id_path(const char *path, const char *prefix, char *id, size_t idlen,
                          const char **tail)
{
    size_t plen = strlen(prefix);
    if (strncmp(path, prefix, plen) != 0)
        return false;
    const char *p = path + plen;
    const char *slash = strchr(p, '/');
    size_t n = slash ? (size_t)(slash - p) : strlen(p);
    if (n == 0 || n >= idlen)
        return false;
    memcpy(id, p, n);
    id[n] = '\0';
    *tail = slash ? slash : "";
    return true;
}

static int no_such_path(struct eph_api_req *req)
{
    req->route = "other";
    return eph_api_reply_error(req, 404, "not_found_error", "not_found", NULL,
                               "no such path '%.200s'", req->path);
}

static bool is_printable_ascii(const char *s)
{
    for (; *s; s++)
        if (*s < 0x20 || *s > 0x7e)
            return false;
    return true;
}

/* SPEC 3.5 for a POST that carries Idempotency-Key: returns true when the request was answered
 * here (a replay, 409, 422, or a bad key), false when the handler should run, holding the key. */
static bool idem_gate(struct eph_api_req *req)
{
    const char *key = eph_api_header(req, "Idempotency-Key");
    if (!key)
        return false;
    if (strlen(key) == 0 || strlen(key) > 255 || !is_printable_ascii(key)) {
        eph_api_reply_error(req, 400, "invalid_request_error", "invalid_parameter",
                            "Idempotency-Key",
                            "'Idempotency-Key' must be 1 to 255 printable ASCII characters");
        return true;
    }
    /* The request's identity: method, path and the body in canonical form (keys sorted), or the
     * raw bytes when it is not JSON (it will fail validation, and then nothing is kept). */
    struct eph_buf b;
    eph_buf_init(&b, req->svc->cfg->max_body_bytes * 2 + 4096);
    json_t *body = req->body.len ? json_loadb(req->body.data, req->body.len,
                                              JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, NULL)
                                 : NULL;
    char *canon = body ? json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(body);
    int rc = eph_buf_appendf(&b, "%s %s\n", req->method, req->path);
    if (!rc)
        rc = canon ? eph_buf_appends(&b, canon)
                   : eph_buf_append(&b, req->body.data ? req->body.data : "", req->body.len);
    free(canon);
    if (rc) {
        eph_buf_release(&b);
        eph_api_reply_error(req, 500, "api_error", "internal_error", NULL, "out of memory");
        return true;
    }
    char hash[65];
    eph_sha256_hex(b.data, b.len, hash);
    eph_buf_release(&b);

    struct eph_store *st = req->svc->store;
    struct eph_idem prev = {0};
    int64_t now = eph_clock_real_ms();
    unsigned ttl =
        req->svc->cfg->idempotency_ttl_seconds ? req->svc->cfg->idempotency_ttl_seconds : 1;
    rc = st->ops->idem_begin(st, req->org_id, key, hash, now, now - (int64_t)ttl * 1000, &prev);
    if (rc == 0) {
        req->idem_active = true;
        snprintf(req->idem_key, sizeof(req->idem_key), "%s", key);
        return false;
    }
    if (rc != -EEXIST) {
        eph_api_reply_store_unavailable(req);
        return true;
    }
    if (strcmp(prev.request_hash, hash) != 0) {
        free(prev.response_body);
        eph_api_reply_error(req, 422, "idempotency_error", "idempotency_key_reused",
                            "Idempotency-Key",
                            "this idempotency key was used with a different request");
        return true;
    }
    if (prev.status_code == 0) {
        free(prev.response_body);
        eph_api_reply_error(req, 409, "idempotency_error", "idempotency_key_in_use",
                            "Idempotency-Key",
                            "a request with this idempotency key is still in progress");
        return true;
    }
    json_t *stored = json_loads(prev.response_body ? prev.response_body : "", 0, NULL);
    free(prev.response_body);
    /* A run is replayed as it is now, not as it was when it was created. */
    const char *object = json_string_value(json_object_get(stored, "object"));
    const char *rid = json_string_value(json_object_get(stored, "id"));
    struct eph_run r;
    if (object && strcmp(object, "run") == 0 && rid &&
        st->ops->run_get(st, rid, req->org_id, &r) == 0) {
        json_decref(stored);
        stored = eph_run_to_json(&r, req->svc->cfg->retention_days);
        eph_run_release(&r);
    }
    if (!stored)
        stored = json_object();
    eph_api_reply_json(req, 200, stored, "Idempotent-Replayed", "true");
    return true;
}

/* One line per method and path pattern. A handler takes the path's {id} (or {name}) when the
 * pattern has one. public: answered without a key. idempotent: a POST whose Idempotency-Key is
 * honoured (SPEC 3.5) where a retry could do something twice; creating a key or a connection is
 * not: their bodies hold secrets that must not be kept, even hashed, and a connection's name is
 * unique anyway. */
struct route {
    const char *pattern;
    const char *method;
    int (*fn)(struct eph_api_req *req);
    int (*fn_id)(struct eph_api_req *req, const char *id);
    bool public, idempotent;
};

static const struct route routes[] = {
    {"/healthz", "GET", eph_api_healthz, NULL, true, false},
    {"/metrics", "GET", eph_api_metrics, NULL, true, false},
    /* The web UI's pages and assets need no key: the page asks for one and sends it itself. */
    {"web", "GET", eph_api_static_serve, NULL, true, false},
    {"/v1/runs", "GET", eph_api_runs_list, NULL, false, false},
    {"/v1/runs", "POST", eph_api_runs_create, NULL, false, true},
    {"/v1/runs/{id}", "GET", NULL, eph_api_runs_get, false, false},
    {"/v1/runs/{id}/events", "GET", NULL, eph_api_runs_events, false, false},
    {"/v1/runs/{id}/transcript", "GET", NULL, eph_api_runs_transcript, false, false},
    {"/v1/runs/{id}/cancel", "POST", NULL, eph_api_runs_cancel, false, true},
    {"/v1/balance", "GET", eph_api_balance, NULL, false, false},
    {"/v1/credits", "POST", eph_api_credits, NULL, false, true},
    {"/v1/keys", "GET", eph_api_keys_list, NULL, false, false},
    {"/v1/keys", "POST", eph_api_keys_create, NULL, false, false},
    {"/v1/keys/{id}", "DELETE", NULL, eph_api_keys_delete, false, false},
    {"/v1/connections", "GET", eph_api_connections_list, NULL, false, false},
    {"/v1/connections", "POST", eph_api_connections_create, NULL, false, false},
    {"/v1/connections/{name}", "GET", NULL, eph_api_connections_get, false, false},
    {"/v1/connections/{name}", "DELETE", NULL, eph_api_connections_delete, false, false},
};
#define NROUTES (sizeof(routes) / sizeof(routes[0]))

/* The path's pattern (a static string) and its {id}; NULL when no pattern matches. */
static const char *match_pattern(const char *p, char *id, size_t idlen)
{
    const char *tail = "";
    for (size_t i = 0; i < NROUTES; i++)
        if (!strchr(routes[i].pattern, '{') && strcmp(p, routes[i].pattern) == 0)
            return routes[i].pattern;
    if (match_id_path(p, "/v1/runs/", id, idlen, &tail)) {
        if (!*tail)
            return "/v1/runs/{id}";
        if (strcmp(tail, "/events") == 0)
            return "/v1/runs/{id}/events";
        if (strcmp(tail, "/cancel") == 0)
            return "/v1/runs/{id}/cancel";
        if (strcmp(tail, "/transcript") == 0)
            return "/v1/runs/{id}/transcript";
        return NULL;
    }
    if (match_id_path(p, "/v1/keys/", id, idlen, &tail) && !*tail)
        return "/v1/keys/{id}";
    if (match_id_path(p, "/v1/connections/", id, idlen, &tail) && !*tail)
        return "/v1/connections/{name}";
    if (eph_api_static_match(p))
        return "web";
    return NULL;
}

/* 405 with the methods the path takes in Allow (HEAD wherever GET is). */
static int method_not_allowed(struct eph_api_req *req)
{
    char allow[64] = "";
    for (size_t i = 0; i < NROUTES; i++) {
        if (strcmp(routes[i].pattern, req->route) != 0)
            continue;
        size_t n = strlen(allow);
        snprintf(allow + n, sizeof(allow) - n, "%s%s%s", n ? ", " : "", routes[i].method,
                 strcmp(routes[i].method, "GET") == 0 ? ", HEAD" : "");
    }
    char text[384];
    snprintf(text, sizeof(text), "method %.16s is not allowed on '%s' (allowed: %s)", req->method,
             req->route, allow);
    json_t *err = json_pack("{s:s, s:s, s:s, s:s}", "type", "invalid_request_error", "code",
                            "method_not_allowed", "message", text, "request_id", req->request_id);
    return eph_api_reply_json(req, 405, json_pack("{s:o}", "error", err), "Allow", allow);
}

/* Query arguments, collected for validation (at most QUERY_MAX; more is refused). */
#define QUERY_MAX 16
struct query_args {
    size_t n;
    bool too_many;
    const char *names[QUERY_MAX];
    const char *values[QUERY_MAX];
};

static enum MHD_Result collect_query(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
    struct query_args *q = cls;
    if (q->n == QUERY_MAX) {
        q->too_many = true;
        return MHD_NO;
    }
    q->names[q->n] = key;
    q->values[q->n++] = value;
    return MHD_YES;
}

/* The request's query arguments and JSON body against the route's rules; true when answered. */
static bool refuse_input(struct eph_api_req *req)
{
    struct query_args q = {0};
    MHD_get_connection_values(req->conn, MHD_GET_ARGUMENT_KIND, collect_query, &q);
    struct eph_api_error e;
    if (q.too_many) {
        eph_api_reply_error(req, 400, "invalid_request_error", "invalid_parameter", NULL,
                            "more than %d query parameters", QUERY_MAX);
        return true;
    }
    if (eph_api_validate_query(req->route, req->method, q.n, q.names, q.values, &req->query, &e)) {
        eph_api_reply_invalid(req, &e);
        return true;
    }
    const char *ct = eph_api_header(req, "Content-Type");
    if (req->body.len && ct && !eph_api_content_type_is_json(ct)) {
        eph_api_reply_error(req, 415, "invalid_request_error", "unsupported_media_type", NULL,
                            "the body must be application/json, not '%.64s'", ct);
        return true;
    }
    return false;
}

static int route(struct eph_api_req *req)
{
    char id[80];
    req->route = match_pattern(req->path, id, sizeof(id));
    if (!req->route)
        return no_such_path(req);
    /* HEAD is GET without the body (the server drops it). */
    const char *m = strcmp(req->method, "HEAD") == 0 ? "GET" : req->method;
    const struct route *rt = NULL;
    for (size_t i = 0; i < NROUTES && !rt; i++)
        if (strcmp(routes[i].pattern, req->route) == 0 && strcmp(routes[i].method, m) == 0)
            rt = &routes[i];
    /* The pattern first, so that every answer (401s included) is counted under its route. */
    if (!rt)
        return method_not_allowed(req);
    if (!rt->public && !eph_api_authenticate(req))
        return MHD_YES;
    if (refuse_input(req))
        return MHD_YES;
    if (rt->idempotent) {
        if (rt->fn == eph_api_runs_create && atomic_load(&req->svc->shutting_down))
            return eph_api_reply_error(req, 503, "api_error", "shutting_down", NULL,
                                       "the server is shutting down");
        if (idem_gate(req))
            return MHD_YES;
    }
    return rt->fn ? rt->fn(req) : rt->fn_id(req, id);
}

/* 413, counted under the route the body was meant for. */
static int body_too_large(struct eph_api_req *req)
{
    char id[80];
    const char *r = match_pattern(req->path, id, sizeof(id));
    req->route = r ? r : "other";
    return eph_api_reply_error(req, 413, "invalid_request_error", "body_too_large", NULL,
                               "request body over the limit of %zu bytes",
                               req->svc->cfg->max_body_bytes);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **state)
{
    struct eph_api *api = cls;
    struct eph_api_req *req = *state;
    if (!req) {
        req = calloc(1, sizeof(*req));
        if (!req)
            return MHD_NO;
        req->svc = api->svc;
        req->parker = api->parker;
        req->conn = conn;
        req->method = method;
        req->path = url;
        req->route = "other";
        req->start_ns = eph_clock_mono_ns();
        /* 8 random bytes: unique enough to find one request in the logs, and made here, never
         * taken from the client, so it is safe to print. */
        if (eph_id_hex("req_", 8, req->request_id, sizeof(req->request_id)))
            snprintf(req->request_id, sizeof(req->request_id), "req_unknown");
        eph_buf_init(&req->body, api->svc->cfg->max_body_bytes);
        *state = req;
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > api->svc->cfg->max_body_bytes)
            return (enum MHD_Result)body_too_large(req);
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (!req->body_too_large && eph_buf_append(&req->body, upload_data, *upload_data_size))
            req->body_too_large = true;
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (req->answered)
        return MHD_YES;
    eph_log_set_request(req->request_id);
    int rc;
    if (req->body_too_large) {
        rc = body_too_large(req);
    } else if (req->parked) {
        /* Resumed by the parker: the handler takes up where it left off. */
        req->parked = false;
        rc = req->resume(req);
    } else {
        rc = route(req);
    }
    if (!req->answered && !req->parked)
        rc = eph_api_reply_error(req, 500, "api_error", "internal_error", NULL, "internal error");
    eph_log_set_request(NULL);
    return (enum MHD_Result)rc;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **state,
                         enum MHD_RequestTerminationCode toe)
{
    struct eph_api_req *req = *state;
    if (!req)
        return;
    eph_metrics_observe_http(req->method, req->route, req->status,
                             eph_clock_mono_ns() - req->start_ns);
    /* A request that ended without an answer (the client left) releases its idempotency key. */
    if (req->idem_active)
        idem_finish(req, 499, NULL);
    eph_live_put(req->live);
    eph_buf_release(&req->body);
    free(req);
    *state = NULL;
}

__attribute__((format(printf, 2, 0))) static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = '\0';
    EPH_DEBUG("http", "%s", msg);
}

static int parse_listen(const char *listen, struct sockaddr_storage *ss, socklen_t *len)
{
    char host[256];
    const char *colon = strrchr(listen, ':');
    if (!colon || (size_t)(colon - listen) >= sizeof(host))
        return -EINVAL;
    memcpy(host, listen, (size_t)(colon - listen));
    host[colon - listen] = '\0';
    char *end;
    unsigned long port = strtoul(colon + 1, &end, 10);
    if (*end || port > 65535 || end == colon + 1)
        return -EINVAL;
    memset(ss, 0, sizeof(*ss));
    char *h = host;
    if (h[0] == '[') {
        size_t hl = strlen(h);
        if (hl < 2 || h[hl - 1] != ']')
            return -EINVAL;
        h[hl - 1] = '\0';
        h++;
    }
    struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, h, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        in4->sin_port = htons((uint16_t)port);
        *len = sizeof(*in4);
        return 0;
    }
    if (inet_pton(AF_INET6, h, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        *len = sizeof(*in6);
        return 0;
    }
    return -EINVAL;
}

int eph_api_start(struct eph_service *svc, struct eph_api **out, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    socklen_t sslen;
    if (parse_listen(svc->cfg->listen, &ss, &sslen)) {
        snprintf(err, errlen, "invalid listen address '%s' (want ADDR:PORT)", svc->cfg->listen);
        return -EINVAL;
    }
    struct eph_api *api = calloc(1, sizeof(*api));
    if (!api)
        return -ENOMEM;
    api->svc = svc;
    /* Polling threads, not a thread per connection: waiting requests park (park.c). */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ERROR_LOG;
    if (ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    int prc = eph_api_park_start(svc->live, &api->parker);
    if (prc) {
        snprintf(err, errlen, "cannot start the parker thread: %s", strerror(-prc));
        free(api);
        return prc;
    }
    api->mhd = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, api, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)4096, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120, MHD_OPTION_THREAD_POOL_SIZE,
        (unsigned)API_THREADS, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
        MHD_OPTION_THREAD_STACK_SIZE, (size_t)(512u << 10), MHD_OPTION_END);
    if (!api->mhd) {
        snprintf(err, errlen, "cannot listen on '%s': %s", svc->cfg->listen, strerror(errno));
        eph_api_park_free(api->parker);
        free(api);
        return -EADDRINUSE;
    }
    *out = api;
    return 0;
}

void eph_api_stop(struct eph_api *api)
{
    if (!api)
        return;
    /* MHD must not be stopped with a suspended connection: resume them all first (they answer
     * with what they have), and nothing parks after this. */
    eph_api_park_stop(api->parker);
    MHD_stop_daemon(api->mhd);
    eph_api_park_free(api->parker);
    free(api);
}
