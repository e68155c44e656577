/*
 * server.c - the HTTP server: connection handling, body accumulation with a cap, routing, auth,
 * and the JSON answer helpers.
 */
#include "api/api.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "common/id.h"
#include "common/log.h"

struct eph_api {
    struct MHD_Daemon *mhd;
    struct eph_service *svc;
};

/* JSON numbers such as event times print with at most 10 significant digits. */
#define DUMP_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(10))

const char *eph_api_header(struct eph_api_req *req, const char *name)
{
    return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

const char *eph_api_query(struct eph_api_req *req, const char *name)
{
    return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, name);
}

unsigned eph_api_prefer_wait(struct eph_api_req *req, unsigned max)
{
    const char *p = eph_api_header(req, "Prefer");
    if (!p)
        return 0;
    const char *w = strstr(p, "wait=");
    if (!w)
        return 0;
    char *end;
    unsigned long n = strtoul(w + 5, &end, 10);
    if (end == w + 5)
        return 0;
    return n > max ? max : (unsigned)n;
}

static int queue(struct eph_api_req *req, unsigned status, char *text, const char *extra_header,
                 const char *extra_value)
{
    size_t len = text ? strlen(text) : 0;
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, text ? text : (char *)"", MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "application/json");
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    if (extra_header && extra_value)
        MHD_add_response_header(resp, extra_header, extra_value);
    int rc = MHD_queue_response(req->conn, status, resp);
    MHD_destroy_response(resp);
    req->answered = true;
    return rc;
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
    json_t *err = json_pack("{s:s, s:s, s:s}", "type", type, "code", code, "message", msg);
    if (param)
        json_object_set_new(err, "param", json_string(param));
    return eph_api_reply_json(req, status, json_pack("{s:o}", "error", err), NULL, NULL);
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
        eph_api_reply_error(req, 503, "api_error", "store_unavailable", NULL,
                            "the store is unavailable");
        return false;
    }
    return true;
}

/* "/v1/runs/<id>[/<tail>]": copies the id and points tail at what follows (or ""). */
static bool match_run_path(const char *path, char *id, size_t idlen, const char **tail)
{
    static const char prefix[] = "/v1/runs/";
    if (strncmp(path, prefix, sizeof(prefix) - 1) != 0)
        return false;
    const char *p = path + sizeof(prefix) - 1;
    const char *slash = strchr(p, '/');
    size_t n = slash ? (size_t)(slash - p) : strlen(p);
    if (n == 0 || n >= idlen)
        return false;
    memcpy(id, p, n);
    id[n] = '\0';
    *tail = slash ? slash : "";
    return true;
}

static int method_not_allowed(struct eph_api_req *req)
{
    return eph_api_reply_error(req, 405, "invalid_request_error", "method_not_allowed", NULL,
                               "method %s is not allowed on '%s'", req->method, req->path);
}

static int route(struct eph_api_req *req)
{
    const char *m = req->method, *p = req->path;
    bool get = strcmp(m, "GET") == 0, post = strcmp(m, "POST") == 0;

    if (strcmp(p, "/healthz") == 0)
        return get ? eph_api_healthz(req) : method_not_allowed(req);
    if (strncmp(p, "/v1/", 4) != 0)
        return eph_api_reply_error(req, 404, "not_found_error", "not_found", NULL,
                                   "no such path '%s'", p);
    if (!eph_api_authenticate(req))
        return MHD_YES;
    if (strcmp(p, "/v1/runs") == 0) {
        if (post)
            return eph_api_runs_create(req);
        return get ? eph_api_runs_list(req) : method_not_allowed(req);
    }
    if (strcmp(p, "/v1/balance") == 0)
        return get ? eph_api_balance(req) : method_not_allowed(req);
    if (strcmp(p, "/v1/credits") == 0)
        return post ? eph_api_credits(req) : method_not_allowed(req);
    char id[64];
    const char *tail;
    if (match_run_path(p, id, sizeof(id), &tail)) {
        if (strcmp(tail, "") == 0)
            return get ? eph_api_runs_get(req, id) : method_not_allowed(req);
        if (strcmp(tail, "/events") == 0)
            return get ? eph_api_runs_events(req, id) : method_not_allowed(req);
        if (strcmp(tail, "/cancel") == 0)
            return post ? eph_api_runs_cancel(req, id) : method_not_allowed(req);
    }
    return eph_api_reply_error(req, 404, "not_found_error", "not_found", NULL,
                               "no such path '%s'", p);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size, void **state)
{
    struct eph_api *api = cls;
    struct eph_api_req *req = *state;
    if (!req) {
        req = calloc(1, sizeof(*req));
        if (!req)
            return MHD_NO;
        req->svc = api->svc;
        req->conn = conn;
        req->method = method;
        req->path = url;
        eph_buf_init(&req->body, api->svc->cfg->max_body_bytes);
        *state = req;
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > api->svc->cfg->max_body_bytes) {
            return (enum MHD_Result)eph_api_reply_error(
                req, 413, "invalid_request_error", "body_too_large", NULL,
                "request body over the limit of %zu bytes", api->svc->cfg->max_body_bytes);
        }
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
    if (req->body_too_large)
        return (enum MHD_Result)eph_api_reply_error(
            req, 413, "invalid_request_error", "body_too_large", NULL,
            "request body over the limit of %zu bytes", api->svc->cfg->max_body_bytes);
    int rc = route(req);
    if (!req->answered)
        rc = eph_api_reply_error(req, 500, "api_error", "internal_error", NULL,
                                 "internal error");
    return (enum MHD_Result)rc;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **state,
                         enum MHD_RequestTerminationCode toe)
{
    struct eph_api_req *req = *state;
    if (!req)
        return;
    eph_buf_release(&req->body);
    free(req);
    *state = NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
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
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_ERROR_LOG | MHD_USE_AUTO;
    if (ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    api->mhd = MHD_start_daemon(flags, 0, NULL, NULL, on_request, api, MHD_OPTION_SOCK_ADDR,
                                (struct sockaddr *)&ss, MHD_OPTION_NOTIFY_COMPLETED, on_completed,
                                NULL, MHD_OPTION_CONNECTION_LIMIT, (unsigned)1024,
                                MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120,
                                MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
                                MHD_OPTION_THREAD_STACK_SIZE, (size_t)(512u << 10),
                                MHD_OPTION_END);
    if (!api->mhd) {
        snprintf(err, errlen, "cannot listen on '%s': %s", svc->cfg->listen, strerror(errno));
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
    MHD_stop_daemon(api->mhd);
    free(api);
}
