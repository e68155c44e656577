/*
 * server.c - the HTTP server: connection handling, body accumulation with a cap, routing, and
 * metrics of every request. It calls the handlers; the answers, authentication and idempotency
 * that both use are in reply.c, so that no handler calls back into the server.
 */
#include "api/api.h"
#include "api/guard.h"
#include "api/static.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

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
    struct eph_api_forwarder *forwarder;
    struct eph_api_inflight *inflight; /* creates holding their idempotency key (reply.c) */
    /* Connection places and the reading deadline (guard.h); its thread ends the connections
     * past their deadline. */
    struct eph_api_guard *guard;
    pthread_t guard_thread;
    bool guard_started, guard_stop;
    pthread_mutex_t guard_lock;
    pthread_cond_t guard_cond;
};

/* Threads polling the sockets. Handlers only wait on the store (milliseconds); anything longer
 * parks its connection, so a few threads serve any number of clients. */
#define API_THREADS 4

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

/* One line per method and path pattern. A handler takes the path's {id} (or {name}) when the
 * pattern has one. public: answered without a key. idempotent: a POST whose Idempotency-Key is
 * honoured (docs/API.md, "Idempotency") where a retry could do something twice; creating a key or a
 * connection is not: their bodies hold secrets that must not be kept, even hashed, and a
 * connection's name is unique anyway. */
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
    {"/v1/runs/{id}/outputs", "GET", NULL, eph_api_runs_outputs, false, false},
    {"/v1/runs/{id}/outputs/{path}", "GET", NULL, eph_api_runs_output, false, false},
    {"/v1/runs/{id}/cancel", "POST", NULL, eph_api_runs_cancel, false, true},
    {"/v1/balance", "GET", eph_api_balance, NULL, false, false},
    {"/v1/models", "GET", eph_api_models_list, NULL, false, false},
    {"/v1/credits", "POST", eph_api_credits, NULL, false, true},
    {"/v1/keys", "GET", eph_api_keys_list, NULL, false, false},
    {"/v1/keys", "POST", eph_api_keys_create, NULL, false, false},
    {"/v1/keys/{id}", "DELETE", NULL, eph_api_keys_delete, false, false},
    {"/v1/connections", "GET", eph_api_connections_list, NULL, false, false},
    {"/v1/connections", "POST", eph_api_connections_create, NULL, false, false},
    {"/v1/connections/{name}", "GET", NULL, eph_api_connections_get, false, false},
    {"/v1/connections/{name}", "DELETE", NULL, eph_api_connections_delete, false, false},
    {"/v1/images", "GET", eph_api_images_list, NULL, false, false},
    {"/v1/images", "POST", eph_api_images_create, NULL, false, false},
    {"/v1/images/{name}", "GET", NULL, eph_api_images_get, false, false},
    {"/v1/images/{name}", "DELETE", NULL, eph_api_images_delete, false, false},
    {"/v1/images/{name}/log", "GET", NULL, eph_api_images_log, false, false},
    {"/v1/sandboxes", "GET", eph_api_sandboxes_list, NULL, false, false},
    {"/v1/sandboxes", "POST", eph_api_sandboxes_create, NULL, false, true},
    {"/v1/sandboxes/{id}", "GET", NULL, eph_api_sandboxes_get, false, false},
    {"/v1/sandboxes/{id}", "DELETE", NULL, eph_api_sandboxes_delete, false, false},
    {"/v1/sandboxes/{id}/events", "GET", NULL, eph_api_sandboxes_sub, false, false},
    /* Not idempotent: a command's answer holds its output, which a key's record would keep. */
    {"/v1/sandboxes/{id}/commands", "POST", NULL, eph_api_sandboxes_sub, false, false},
    {"/v1/sandboxes/{id}/commands/{cid}", "GET", NULL, eph_api_sandboxes_sub, false, false},
    {"/v1/sandboxes/{id}/commands/{cid}/events", "GET", NULL, eph_api_sandboxes_sub, false, false},
    {"/v1/sandboxes/{id}/commands/{cid}/kill", "POST", NULL, eph_api_sandboxes_sub, false, false},
    {"/v1/sandboxes/{id}/files", "GET", NULL, eph_api_sandboxes_sub, false, false},
    {"/v1/sandboxes/{id}/files/{path}", "GET", NULL, eph_api_sandboxes_sub, false, false},
    {"/v1/sandboxes/{id}/files/{path}", "PUT", NULL, eph_api_sandboxes_sub, false, false},
    {"/v1/webhooks", "GET", eph_api_webhooks_list, NULL, false, false},
    {"/v1/webhooks", "POST", eph_api_webhooks_create, NULL, false, false},
    {"/v1/webhooks/{id}", "GET", NULL, eph_api_webhooks_get, false, false},
    {"/v1/webhooks/{id}", "DELETE", NULL, eph_api_webhooks_delete, false, false},
    {"/v1/webhooks/{id}/deliveries", "GET", NULL, eph_api_webhooks_deliveries, false, false},
    {"/v1/webhooks/{id}/deliveries/{event_id}", "GET", NULL, eph_api_webhooks_delivery, false,
     false},
};
/* The one route whose body is raw bytes, not JSON, under a cap of its own. */
#define UPLOAD_ROUTE "/v1/sandboxes/{id}/files/{path}"
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
        if (strcmp(tail, "/outputs") == 0)
            return "/v1/runs/{id}/outputs";
        if (strncmp(tail, "/outputs/", 9) == 0 && tail[9])
            return "/v1/runs/{id}/outputs/{path}";
        return NULL;
    }
    if (match_id_path(p, "/v1/sandboxes/", id, idlen, &tail)) {
        if (!*tail)
            return "/v1/sandboxes/{id}";
        if (!strcmp(tail, "/events"))
            return "/v1/sandboxes/{id}/events";
        if (!strcmp(tail, "/commands"))
            return "/v1/sandboxes/{id}/commands";
        if (!strncmp(tail, "/commands/", 10) && tail[10]) {
            const char *c = tail + 10, *s = strchr(c, '/');
            if (!s)
                return "/v1/sandboxes/{id}/commands/{cid}";
            if (s > c && !strcmp(s, "/events"))
                return "/v1/sandboxes/{id}/commands/{cid}/events";
            if (s > c && !strcmp(s, "/kill"))
                return "/v1/sandboxes/{id}/commands/{cid}/kill";
            return NULL;
        }
        if (!strcmp(tail, "/files"))
            return "/v1/sandboxes/{id}/files";
        if (!strncmp(tail, "/files/", 7) && tail[7])
            return UPLOAD_ROUTE;
        return NULL;
    }
    if (match_id_path(p, "/v1/keys/", id, idlen, &tail) && !*tail)
        return "/v1/keys/{id}";
    if (match_id_path(p, "/v1/connections/", id, idlen, &tail) && !*tail)
        return "/v1/connections/{name}";
    if (match_id_path(p, "/v1/images/", id, idlen, &tail))
        return !*tail                  ? "/v1/images/{name}"
               : !strcmp(tail, "/log") ? "/v1/images/{name}/log"
                                       : NULL;
    if (match_id_path(p, "/v1/webhooks/", id, idlen, &tail))
        return !*tail                         ? "/v1/webhooks/{id}"
               : !strcmp(tail, "/deliveries") ? "/v1/webhooks/{id}/deliveries"
               : !strncmp(tail, "/deliveries/", 12) && tail[12] && !strchr(tail + 12, '/')
                   ? "/v1/webhooks/{id}/deliveries/{event_id}"
                   : NULL;
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
    if (req->body.len && ct && !eph_api_content_type_is_json(ct) &&
        strcmp(req->route, UPLOAD_ROUTE) != 0) {
        eph_api_reply_error(req, 415, "invalid_request_error", "unsupported_media_type", NULL,
                            "the body must be application/json, not '%.64s'", ct);
        return true;
    }
    return false;
}

/* The request's route (req->route set to its pattern, or NULL when no pattern matches). */
static const struct route *find_route(struct eph_api_req *req, char *id, size_t idlen)
{
    req->route = match_pattern(req->path, id, idlen);
    if (!req->route)
        return NULL;
    /* HEAD is GET without the body (the server drops it). */
    const char *m = strcmp(req->method, "HEAD") == 0 ? "GET" : req->method;
    for (size_t i = 0; i < NROUTES; i++)
        if (strcmp(routes[i].pattern, req->route) == 0 && strcmp(routes[i].method, m) == 0)
            return &routes[i];
    return NULL;
}

static int route(struct eph_api_req *req)
{
    char id[80];
    const struct route *rt = find_route(req, id, sizeof(id));
    if (!req->route)
        return no_such_path(req);
    /* The pattern first, so that every answer (401s included) is counted under its route. */
    if (!rt)
        return method_not_allowed(req);
    if (!rt->public && !req->authenticated && !eph_api_authenticate(req))
        return MHD_YES;
    if (refuse_input(req))
        return MHD_YES;
    if (rt->idempotent) {
        if ((rt->fn == eph_api_runs_create || rt->fn == eph_api_sandboxes_create) &&
            atomic_load(&req->svc->shutting_down))
            return eph_api_reply_error(req, 503, "api_error", "shutting_down", NULL,
                                       "the server is shutting down");
        /* A create's run id is chosen before its key is recorded, so that the record names
         * the run it makes (reply.c, idem_pending). */
        bool sandbox = rt->fn == eph_api_sandboxes_create;
        if ((rt->fn == eph_api_runs_create || sandbox) &&
            eph_id_hex(sandbox ? "sbx_" : "run_", 16, req->run_id, sizeof(req->run_id)))
            return eph_api_reply_error(req, 500, "api_error", "internal_error", NULL,
                                       "internal error");
        if (eph_api_idem_gate(req))
            return MHD_YES;
    }
    return rt->fn ? rt->fn(req) : rt->fn_id(req, id);
}

/* The most bytes a request's body may have: an upload's own cap, else max_body_bytes. */
static uint64_t body_cap(struct eph_api_req *req)
{
    char id[80];
    const char *r = match_pattern(req->path, id, sizeof(id));
    if (r && !strcmp(r, UPLOAD_ROUTE) && !strcmp(req->method, "PUT"))
        return req->svc->cfg->sandboxes.max_upload_bytes;
    return req->svc->cfg->max_body_bytes;
}

/* 413, counted under the route the body was meant for. */
static int body_too_large(struct eph_api_req *req)
{
    char id[80];
    const char *r = match_pattern(req->path, id, sizeof(id));
    req->route = r ? r : "other";
    return eph_api_reply_error(req, 413, "invalid_request_error", "body_too_large", NULL,
                               "request body over the limit of %llu bytes",
                               (unsigned long long)body_cap(req));
}

static struct eph_api_guard_conn *guard_conn(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* At the head: a request for the API is authenticated before its body is read, so that only a
 * key holder may take longer than the reading deadline to send one (guard.h). True when it was
 * answered (401, 429, 503). */
static bool authenticate_early(struct eph_api *api, struct eph_api_req *req)
{
    char id[80];
    const struct route *rt = find_route(req, id, sizeof(id));
    if (!rt || rt->public)
        return false;
    if (!eph_api_authenticate(req))
        return true;
    req->authenticated = true;
    eph_api_guard_busy(api->guard, guard_conn(req->conn));
    return false;
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
        req->forwarder = api->forwarder;
        req->guard = api->guard;
        req->inflight = api->inflight;
        req->conn = conn;
        req->method = method;
        req->path = url;
        req->route = "other";
        req->start_ns = eph_clock_mono_ns();
        /* 8 random bytes: unique enough to find one request in the logs, and made here, never
         * taken from the client, so it is safe to print. */
        if (eph_id_hex("req_", 8, req->request_id, sizeof(req->request_id)))
            snprintf(req->request_id, sizeof(req->request_id), "req_unknown");
        uint64_t cap = body_cap(req);
        eph_buf_init(&req->body, (size_t)cap);
        *state = req;
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > cap)
            return (enum MHD_Result)body_too_large(req);
        eph_log_set_request(req->request_id);
        authenticate_early(api, req);
        eph_log_set_request(NULL);
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (!req->body_too_large && eph_buf_append(&req->body, upload_data, *upload_data_size))
            req->body_too_large = true;
        *upload_data_size = 0;
        return MHD_YES;
    }
    /* The whole request is in: no reading deadline while it is answered. */
    eph_api_guard_busy(api->guard, guard_conn(conn));
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
    struct eph_api *api = cls;
    /* Answered: the connection reads its next request, under the deadline again. */
    eph_api_guard_idle(api->guard, guard_conn(conn), eph_clock_mono_ns() / 1000000u);
    struct eph_api_req *req = *state;
    if (!req)
        return;
    eph_metrics_observe_http(req->method, req->route, req->status,
                             eph_clock_mono_ns() - req->start_ns);
    /* A request that ended without an answer (the client left) releases its idempotency key. */
    if (req->idem_active)
        eph_api_idem_finish(req, 499, NULL);
    eph_live_put(req->live);
    eph_drive_op_put(req->op);
    eph_api_forward_release(req->forward);
    eph_buf_release(&req->body);
    free(req);
    *state = NULL;
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    struct eph_api *api = cls;
    if (code != MHD_CONNECTION_NOTIFY_STARTED) {
        /* MHD tells this before it closes the socket: from here on the guard never touches it. */
        eph_api_guard_close(api->guard, *socket_context);
        *socket_context = NULL;
        return;
    }
    const union MHD_ConnectionInfo *ai =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const union MHD_ConnectionInfo *fi =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!fi)
        return;
    *socket_context = eph_api_guard_open(api->guard, ai ? ai->client_addr : NULL, fi->connect_fd,
                                         eph_clock_mono_ns() / 1000000u);
    /* Refused (every place under its limits is busy): closed as a client that left. */
    if (!*socket_context)
        shutdown(fi->connect_fd, SHUT_RDWR);
}

static void guard_shutdown(int fd, void *ctx)
{
    shutdown(fd, SHUT_RDWR);
}

static void *guard_main(void *arg)
{
    struct eph_api *api = arg;
    pthread_mutex_lock(&api->guard_lock);
    while (!api->guard_stop) {
        uint64_t next_ms = eph_api_guard_expire(api->guard, eph_clock_mono_ns() / 1000000u);
        struct timespec ts;
        eph_clock_timespec(eph_clock_mono_ns() + (next_ms + 1) * 1000000u, &ts);
        pthread_cond_timedwait(&api->guard_cond, &api->guard_lock, &ts);
    }
    pthread_mutex_unlock(&api->guard_lock);
    return NULL;
}

/* Stops the guard's thread (before MHD stops: nothing is shut down after) and frees the guard
 * (after: MHD's close notifications use it). */
static void guard_stop(struct eph_api *api)
{
    if (api->guard_started) {
        pthread_mutex_lock(&api->guard_lock);
        api->guard_stop = true;
        pthread_cond_signal(&api->guard_cond);
        pthread_mutex_unlock(&api->guard_lock);
        pthread_join(api->guard_thread, NULL);
        api->guard_started = false;
    }
}

static int guard_start(struct eph_api *api)
{
    const struct eph_config *cfg = api->svc->cfg;
    struct eph_api_guard_limits lim = {
        .max_connections = cfg->http.max_connections,
        .per_address = cfg->http.max_connections_per_address,
        .head_ms = cfg->http.request_head_seconds * 1000u,
        .auth_failures_per_minute = cfg->http.auth_failures_per_minute,
    };
    int rc = eph_api_guard_new(&lim, guard_shutdown, NULL, &api->guard);
    if (rc)
        return rc;
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&api->guard_cond, &a);
    pthread_condattr_destroy(&a);
    pthread_mutex_init(&api->guard_lock, NULL);
    rc = -pthread_create(&api->guard_thread, NULL, guard_main, api);
    api->guard_started = rc == 0;
    return rc;
}

static void api_free(struct eph_api *api)
{
    guard_stop(api);
    if (api->mhd)
        MHD_stop_daemon(api->mhd);
    if (api->guard) {
        eph_api_guard_free(api->guard);
        pthread_cond_destroy(&api->guard_cond);
        pthread_mutex_destroy(&api->guard_lock);
    }
    eph_api_park_free(api->parker);
    eph_api_forwarder_free(api->forwarder);
    eph_api_inflight_free(api->inflight);
    free(api);
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
    const struct eph_config *cfg = svc->cfg;
    if (!cfg->http.max_connections || !cfg->http.max_connections_per_address ||
        !cfg->http.request_head_seconds) {
        snprintf(err, errlen,
                 "http.max_connections, http.max_connections_per_address and "
                 "http.request_head_seconds must be at least 1");
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
    if ((prc = eph_api_forwarder_new(&api->forwarder))) {
        snprintf(err, errlen, "cannot make the forwarder: %s", strerror(-prc));
        api_free(api);
        return prc;
    }
    if ((prc = eph_api_inflight_new(&api->inflight)) || (prc = guard_start(api))) {
        snprintf(err, errlen, "cannot start the connection guard: %s", strerror(-prc));
        api_free(api);
        return prc;
    }
    /* MHD's own limit is above the guard's, so that the guard decides; the margin holds the
     * connections it has given up on until MHD has closed them. Its idle timeout still ends a
     * busy connection that stopped moving (an event stream has a keep-alive every
     * sse_keepalive_seconds, and a parked one is not timed). */
    unsigned mhd_limit = svc->cfg->http.max_connections + svc->cfg->http.max_connections / 8 + 16;
    api->mhd = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, api, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, api, MHD_OPTION_NOTIFY_CONNECTION, on_connection,
        api, MHD_OPTION_CONNECTION_LIMIT, mhd_limit, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)API_THREADS, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log,
        NULL, MHD_OPTION_THREAD_STACK_SIZE, (size_t)(512u << 10), MHD_OPTION_END);
    if (!api->mhd) {
        snprintf(err, errlen, "cannot listen on '%s': %s", svc->cfg->listen, strerror(errno));
        api_free(api);
        return -EADDRINUSE;
    }
    *out = api;
    return 0;
}

uint16_t eph_api_port(struct eph_api *api)
{
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(api->mhd, MHD_DAEMON_INFO_BIND_PORT);
    return info ? info->port : 0;
}

void eph_api_stop(struct eph_api *api)
{
    if (!api)
        return;
    /* MHD must not be stopped with a suspended connection: resume them all first (they answer
     * with what they have), and nothing parks after this. */
    eph_api_park_stop(api->parker);
    eph_api_forwarder_stop(api->forwarder);
    api_free(api);
}
