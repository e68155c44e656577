/*
 * reply.c - what the server (server.c) and the handlers both use: the request's headers, the
 * answers (JSON, text, errors, lists), authentication and roles, parking until a run settles, and
 * the idempotency of POSTs (docs/API.md, "Idempotency"). It calls neither the server nor a handler.
 */
#include "api/api.h"
#include "api/guard.h"
#include "api/json.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/id.h"
#include "common/log.h"
#include "api/validate.h"

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

void eph_api_add_common_headers(struct eph_api_req *req, struct MHD_Response *resp, unsigned status)
{
    MHD_add_response_header(resp, "Request-Id", req->request_id);
    /* A 429 (too many queued runs, too many failed keys) or a 503 (the store, a queue, a
     * shutdown) passes: say when to look again rather than let clients retry in a tight loop. */
    if (status == 429 || status == 503) {
        char secs[16];
        snprintf(secs, sizeof(secs), "%u", req->retry_after);
        MHD_add_response_header(resp, "Retry-After",
                                req->retry_after ? secs : EPH_API_RETRY_AFTER_SECONDS);
    }
    /* RFC 6750: a 401 names the scheme it wants, and says the token was refused when one was
     * sent, so that a client library can tell "send a key" from "this key is not valid". */
    if (status == 401)
        MHD_add_response_header(resp, "WWW-Authenticate",
                                eph_api_header(req, "Authorization")
                                    ? "Bearer realm=\"ephemeral\", error=\"invalid_token\""
                                    : "Bearer realm=\"ephemeral\"");
}

/* Queues a response whose own headers are set: the common ones, then it is sent and let go. */
static int queue_made(struct eph_api_req *req, unsigned status, struct MHD_Response *resp)
{
    eph_api_add_common_headers(req, resp, status);
    int rc = MHD_queue_response(req->conn, status, resp);
    MHD_destroy_response(resp);
    req->answered = true;
    req->status = status;
    return rc;
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
    if (extra_header && extra_value)
        MHD_add_response_header(resp, extra_header, extra_value);
    return queue_made(req, status, resp);
}

static int queue(struct eph_api_req *req, unsigned status, char *text, const char *extra_header,
                 const char *extra_value)
{
    eph_api_idem_finish(req, status, text);
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
    eph_api_idem_finish(req, status, NULL);
    return queue_response(req, status, copy, len, content_type, NULL, NULL);
}

int eph_api_reply_bytes(struct eph_api_req *req, const char *content_type, unsigned char *data,
                        size_t len, const char *disposition)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, data ? (void *)data : (void *)"",
                                        data ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        free(data);
        return MHD_NO;
    }
    eph_api_idem_finish(req, 200, NULL);
    MHD_add_response_header(resp, "Content-Type", content_type);
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    /* The type is the server's, from a fixed list: a browser must not guess another. */
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "Content-Security-Policy", "default-src 'none'; sandbox");
    if (disposition)
        MHD_add_response_header(resp, "Content-Disposition", disposition);
    return queue_made(req, 200, resp);
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

static const struct sockaddr *client_address(struct eph_api_req *req)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    return ci ? ci->client_addr : NULL;
}

/* 401 for a key that is not valid, counted against the client's address. */
static bool key_refused(struct eph_api_req *req)
{
    if (req->guard)
        eph_api_guard_auth_failed(req->guard, client_address(req), eph_clock_mono_ns() / 1000000u);
    eph_api_reply_error(req, 401, "authentication_error", "invalid_api_key", NULL,
                        "invalid api key");
    return false;
}

bool eph_api_authenticate(struct eph_api_req *req)
{
    const char *h = eph_api_header(req, "Authorization");
    if (!h) {
        eph_api_reply_error(req, 401, "authentication_error", "missing_api_key", NULL,
                            "missing api key: send 'Authorization: Bearer <key>'");
        return false;
    }
    /* An address that failed too often is refused before its key is looked at, a good one too:
     * otherwise the limit would not slow a guesser, only change the answer to a wrong guess. */
    unsigned wait = req->guard ? eph_api_guard_auth_wait(req->guard, client_address(req),
                                                         eph_clock_mono_ns() / 1000000u)
                               : 0;
    if (wait) {
        req->retry_after = wait;
        eph_api_reply_error(req, 429, "rate_limit_error", "too_many_failed_authentications", NULL,
                            "too many failed authentications from this address; retry in %u "
                            "seconds",
                            wait);
        return false;
    }
    if (strncasecmp(h, "Bearer ", 7) != 0 || !eph_id_is_api_key(h + 7))
        return key_refused(req);
    char hash[65];
    eph_sha256_hex(h + 7, strlen(h + 7), hash);
    struct eph_store *st = req->svc->store;
    int rc = st->ops->key_lookup(st, hash, req->org_id, sizeof(req->org_id), req->role,
                                 sizeof(req->role));
    if (rc == -ENOENT)
        return key_refused(req);
    if (rc) {
        eph_api_reply_store_unavailable(req);
        return false;
    }
    return true;
}

/* ---- idempotency ---- */

struct eph_api_inflight {
    pthread_mutex_t lock;
    struct eph_api_req *head;
};

int eph_api_inflight_new(struct eph_api_inflight **out)
{
    struct eph_api_inflight *f = calloc(1, sizeof(*f));
    if (!f)
        return -ENOMEM;
    pthread_mutex_init(&f->lock, NULL);
    *out = f;
    return 0;
}

void eph_api_inflight_free(struct eph_api_inflight *f)
{
    if (!f)
        return;
    pthread_mutex_destroy(&f->lock);
    free(f);
}

static void inflight_add(struct eph_api_req *req)
{
    struct eph_api_inflight *f = req->inflight;
    if (!f || req->in_listed)
        return;
    pthread_mutex_lock(&f->lock);
    req->in_prev = NULL;
    req->in_next = f->head;
    if (f->head)
        f->head->in_prev = req;
    f->head = req;
    req->in_listed = true;
    pthread_mutex_unlock(&f->lock);
}

static void inflight_remove(struct eph_api_req *req)
{
    struct eph_api_inflight *f = req->inflight;
    if (!f || !req->in_listed)
        return;
    pthread_mutex_lock(&f->lock);
    if (req->in_prev)
        req->in_prev->in_next = req->in_next;
    else
        f->head = req->in_next;
    if (req->in_next)
        req->in_next->in_prev = req->in_prev;
    req->in_listed = false;
    pthread_mutex_unlock(&f->lock);
}

/* Whether another request of this process holds req's key (walked only for a record left in
 * flight). */
static bool inflight_other(struct eph_api_req *req)
{
    struct eph_api_inflight *f = req->inflight;
    bool found = false;
    pthread_mutex_lock(&f->lock);
    for (struct eph_api_req *r = f->head; r && !found; r = r->in_next)
        found = r != req && strcmp(r->org_id, req->org_id) == 0 &&
                strcmp(r->idem_key, req->idem_key) == 0;
    pthread_mutex_unlock(&f->lock);
    return found;
}

void eph_api_idem_finish(struct eph_api_req *req, unsigned status, const char *text)
{
    if (!req->idem_active) {
        inflight_remove(req);
        return;
    }
    req->idem_active = false;
    struct eph_store *st = req->svc->store;
    /* Only a success is remembered: a request that failed (validation, balance, a conflict) can
     * be retried with the same key. */
    int rc = status / 100 == 2 && text
                 ? st->ops->idem_complete(st, req->org_id, req->idem_key, (int)status, text)
                 : st->ops->idem_abandon(st, req->org_id, req->idem_key);
    if (rc)
        EPH_WARN("api", "cannot record an idempotency key: %s", strerror(-rc));
    /* Only now: until its record is written or released, a retry must see it in flight. */
    inflight_remove(req);
}

void eph_api_idem_settle(struct eph_api_req *req, unsigned status, json_t *body)
{
    if (!req->idem_active)
        return;
    char *text = json_dumps(body, DUMP_FLAGS);
    eph_api_idem_finish(req, status, text);
    free(text);
}

/* A record in flight cannot still have its request running after this long: a create goes from
 * its key's record to its run's insert in one handler call (store retries included). */
#define IDEM_STALE_MS (600 * 1000)

/* A record in flight (status 0) met by a request with the same key and body. Its answer may
 * never have been written (the store failed then, or the server died): when it names a run that
 * was stored, it is completed from that run and the request gets the run (1, answered); when
 * that run was not stored and the record is stale, it is dropped (-EAGAIN: begin again). 0: it is
 * in flight indeed (409); another error: the store's. */
/* A run or a sandbox as the API shows it now. */
static json_t *object_of(struct eph_api_req *req, const struct eph_run *r)
{
    return r->kind == EPH_KIND_SANDBOX ? eph_sandbox_to_json(r, req->svc->cfg->retention_days)
                                       : eph_run_to_json(r, req->svc->cfg->retention_days);
}

static int idem_pending(struct eph_api_req *req, const char *key, const struct eph_idem *prev,
                        int64_t now_ms)
{
    struct eph_store *st = req->svc->store;
    json_t *pending = prev->response_body ? json_loads(prev->response_body, 0, NULL) : NULL;
    const char *rid = json_string_value(json_object_get(pending, "id"));
    if (!rid || !(eph_id_is_run(rid) || eph_id_is_sandbox(rid))) {
        json_decref(pending);
        return 0;
    }
    struct eph_run r;
    int rc = st->ops->run_get(st, rid, req->org_id, &r);
    json_decref(pending);
    if (rc == 0) {
        json_t *obj = object_of(req, &r);
        eph_run_release(&r);
        char *text = obj ? json_dumps(obj, DUMP_FLAGS) : NULL;
        int crc = text ? st->ops->idem_complete(st, req->org_id, key, 201, text) : -ENOMEM;
        free(text);
        /* The answer is the run either way; the record is completed at the next try. */
        if (crc)
            EPH_WARN("api", "cannot complete an idempotency key from its run: %s",
                     eph_strerror(crc));
        eph_api_reply_json(req, 200, obj ? obj : json_object(), "Idempotent-Replayed", "true");
        return 1;
    }
    if (rc != -ENOENT)
        return rc;
    /* On a store of one node the requests in flight are this process's: one that none holds
     * is over. Elsewhere another node's may be, for as long as a create can take. */
    bool alone = req->inflight && !st->ops->shared;
    if (alone ? inflight_other(req) : prev->created_at_ms >= now_ms - IDEM_STALE_MS)
        return 0;
    rc = st->ops->idem_abandon(st, req->org_id, key);
    return rc ? rc : -EAGAIN;
}

void eph_api_idem_recover(struct eph_service *svc)
{
    struct eph_store *st = svc->store;
    int64_t now = eph_clock_real_ms();
    /* One node alone has no request in flight before it listens; on a shared store another
     * node's may be. */
    int64_t stale_before = st->ops->shared ? now - IDEM_STALE_MS : now;
    unsigned completed = 0, dropped = 0;
    int rc = st->ops->idem_recover(st, stale_before, &completed, &dropped);
    if (rc)
        EPH_WARN("api", "cannot recover the idempotency keys in flight: %s", eph_strerror(rc));
    else if (completed || dropped)
        EPH_INFO("api",
                 "idempotency keys in flight: %u completed from their runs, %u released (their "
                 "run was never stored)",
                 completed, dropped);
}

static bool idem_begin_or_answer(struct eph_api_req *req, const char *key, const char *hash);

static bool is_printable_ascii(const char *s)
{
    for (; *s; s++)
        if (*s < 0x20 || *s > 0x7e)
            return false;
    return true;
}

/* docs/API.md "Idempotency" for a POST that carries Idempotency-Key: returns true when the request
 * was answered here (a replay, 409, 422, or a bad key), false when the handler should run, holding
 * the key. */
bool eph_api_idem_gate(struct eph_api_req *req)
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

    /* Listed before its record exists, so that no other request takes it for a leftover. */
    snprintf(req->idem_key, sizeof(req->idem_key), "%s", key);
    if (req->run_id[0])
        inflight_add(req);
    bool answered = idem_begin_or_answer(req, key, hash);
    if (answered || !req->idem_active)
        inflight_remove(req);
    return answered;
}

/* The gate's store part: true when answered, false holding the key (req->idem_active). */
static bool idem_begin_or_answer(struct eph_api_req *req, const char *key, const char *hash)
{
    int rc;
    struct eph_store *st = req->svc->store;
    struct eph_idem prev;
    int64_t now = eph_clock_real_ms();
    unsigned ttl =
        req->svc->cfg->idempotency_ttl_seconds ? req->svc->cfg->idempotency_ttl_seconds : 1;
    /* A create's record names the run it will make (its id chosen by the server already). */
    char pending[EPH_RUN_ID_LEN + 40] = "";
    if (req->run_id[0])
        snprintf(pending, sizeof(pending), "{\"object\":\"%s\",\"id\":\"%s\"}",
                 eph_id_is_sandbox(req->run_id) ? "sandbox" : "run", req->run_id);
    for (int attempt = 0;; attempt++) {
        memset(&prev, 0, sizeof(prev));
        rc = st->ops->idem_begin(st, req->org_id, key, hash, pending[0] ? pending : NULL, now,
                                 now - (int64_t)ttl * 1000, &prev);
        if (rc == 0) {
            req->idem_active = true;
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
        if (prev.status_code != 0)
            break;
        int p = attempt ? 0 : idem_pending(req, key, &prev, now);
        free(prev.response_body);
        if (p == -EAGAIN)
            continue;
        if (p < 0)
            eph_api_reply_store_unavailable(req);
        else if (p == 0)
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
    if (object && (!strcmp(object, "run") || !strcmp(object, "sandbox")) && rid &&
        st->ops->run_get(st, rid, req->org_id, &r) == 0) {
        json_decref(stored);
        stored = object_of(req, &r);
        eph_run_release(&r);
    }
    if (!stored)
        stored = json_object();
    eph_api_reply_json(req, 200, stored, "Idempotent-Replayed", "true");
    return true;
}
