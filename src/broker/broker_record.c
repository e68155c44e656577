/*
 * broker_record.c - one run's broker: the record of its exchanges and their replay. See
 * docs/BROKER.md.
 */
#include "broker/broker.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>
#include <sodium.h>

#include "broker/answer.h"
#include "broker/broker_private.h"
#include "broker/event.h"
#include "broker/html.h"
#include "broker/http.h"
#include "broker/meter.h"
#include "broker/pin.h"
#include "broker/policy.h"
#include "broker/redact.h"
#include "common/buf.h"
#include "common/cleanup.h"
#include "common/clock.h"
#include "common/log.h"

/* ---- the record and the replay ------------------------------------------------------------ */

/* The URL of the record, the key a replay matches on: a web request's absolute URI or CONNECT
 * target as sent; a connection's as http://127.0.0.1:3128/<name><normalised path>?<the program's
 * query> (never the query parameters the broker adds). And the program's headers, but the
 * proxy's and the hop-by-hop ones. */
void bk_record_request(struct req_ctx *rc, const struct eph_http_request *req, bool origin)
{
    static const struct eph_conn_target zero;
    struct eph_conn_target *t = origin ? malloc(sizeof(*t)) : NULL;
    int r;
    if (t && (*t = zero, eph_conn_target_parse(req->target, req->target_len, t) == 0))
        r = eph_buf_appendf(&rc->url, "http://127.0.0.1:%d/%s%s%s%.*s", EPH_BROKER_PORT, t->name,
                            t->path, t->query ? "?" : "", (int)t->query_len,
                            t->query ? t->query : "");
    else if (origin)
        r = eph_buf_appendf(&rc->url, "http://127.0.0.1:%d%.*s", EPH_BROKER_PORT,
                            (int)req->target_len, req->target);
    else
        r = eph_buf_append(&rc->url, req->target, req->target_len);
    /* Without its target parsed (out of memory), a connection's URL is not the key a replay
     * matches on. */
    if (r || (origin && !t)) {
        eph_buf_release(&rc->url);
        rc->record_lost = true;
    }
    free(t);
    if (!rc->recording || rc->tunnel)
        return;
    rc->req_headers = json_array();
    if (!rc->req_headers)
        rc->record_lost = true;
    for (size_t i = 0; rc->req_headers && !rc->record_lost && i < req->nheaders; i++) {
        const struct eph_http_header *h = &req->headers[i];
        if (bk_hop_by_hop(h) || bk_is_framing(h) ||
            (h->name_len >= 6 && strncasecmp(h->name, "proxy-", 6) == 0))
            continue;
        json_t *pair;
        int hr = bk_header_json(h->name, h->name_len, h->value, h->value_len, &pair);
        if (hr < 0 || (!hr && json_array_append_new(rc->req_headers, pair)))
            rc->record_lost = true;
    }
}

int eph_broker_set_replay(struct eph_broker *b, json_t *exchanges)
{
    if (!json_is_array(exchanges))
        return -EINVAL;
    size_t n = json_array_size(exchanges), k = 0;
    struct replay_entry *v = calloc(n + 1, sizeof(*v));
    if (!v)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(exchanges, i);
        json_t *rq = json_object_get(x, "request"), *rs = json_object_get(x, "response");
        const char *m = json_string_value(json_object_get(rq, "method"));
        const char *u = json_string_value(json_object_get(rq, "url"));
        const char *h = json_string_value(json_object_get(rq, "body_sha256"));
        /* A tunnel has no body to match (and nothing to replay): it is never an entry. */
        if (!m || !u || !h || strlen(h) != 64 || !json_is_object(rs) ||
            !json_is_integer(json_object_get(rs, "status")))
            continue;
        v[k].method = strdup(m);
        v[k].url = strdup(u);
        memcpy(v[k].sha, h, 65);
        v[k].response = json_incref(rs);
        if (!v[k].method || !v[k].url) {
            b->replay = v, b->nreplay = k + 1;
            return -ENOMEM; /* freed with the broker */
        }
        k++;
    }
    b->replay = v;
    b->nreplay = k;
    return 0;
}

/* Claims the first unused recorded exchange that matches: its response (borrowed), or NULL. */
json_t *bk_replay_claim(struct eph_broker *b, const char *method, const char *url, const char *sha)
{
    json_t *found = NULL;
    pthread_mutex_lock(&b->lock);
    for (size_t i = 0; i < b->nreplay && !found; i++) {
        struct replay_entry *e = &b->replay[i];
        if (!e->used && strcmp(e->method, method) == 0 && strcmp(e->url, url) == 0 &&
            strcasecmp(e->sha, sha) == 0) {
            e->used = true;
            found = e->response;
        }
    }
    pthread_mutex_unlock(&b->lock);
    return found;
}

/* The event of a replayed request: what a live one would say of its target. */
int bk_replay_describe(struct req_ctx *rc, const struct eph_http_request *req, bool is_connect,
                       bool absolute)
{
    struct eph_broker *b = rc->s->b;
    struct eph_http_url u;
    struct eph_http_authority auth;
    if (is_connect) {
        rc->ev.scheme = "tunnel";
        if (eph_http_parse_authority(req->target, req->target_len, 0, &auth) == 0) {
            snprintf(rc->host, sizeof(rc->host), "%s", auth.host.name);
            rc->ev.port = auth.port;
        }
    } else if (absolute) {
        if (eph_http_parse_url(req->target, req->target_len, &u) == 0) {
            snprintf(rc->host, sizeof(rc->host), "%s", u.auth.host.name);
            rc->ev.port = u.auth.port;
            snprintf(rc->path, sizeof(rc->path), "%.*s", (int)u.path_len, u.path);
        }
    } else {
        static const struct eph_conn_target zero;
        struct eph_conn_target *t = malloc(sizeof(*t));
        rc->ev.connection = "?";
        if (!t)
            return -ENOMEM;
        if ((*t = zero, eph_conn_target_parse(req->target, req->target_len, t) == 0)) {
            const struct conn_copy *c = bk_find_conn(b, t->name);
            snprintf(rc->path, sizeof(rc->path), "%s", t->path);
            snprintf(rc->host, sizeof(rc->host), "%s", t->name);
            if (c) {
                struct eph_http_url base;
                rc->ev.connection = c->name;
                rc->ev.scheme = strncmp(c->base_url, "https://", 8) == 0 ? "https" : "http";
                if (eph_http_parse_url(c->base_url, strlen(c->base_url), &base) == 0) {
                    snprintf(rc->host, sizeof(rc->host), "%s", base.auth.host.name);
                    rc->ev.port = base.auth.port;
                }
            }
        }
        free(t);
    }
    return 0;
}

/* Answers from the record, connecting nowhere: the recorded status, headers (with the broker's
 * own framing) and body, or 403 not_recorded. */
void bk_serve_replay(struct req_ctx *rc, const struct eph_http_request *req, const char *after_head,
                     size_t nafter)
{
    struct eph_broker *b = rc->s->b;
    if (rc->tunnel) {
        bk_answer_error(rc, 403, "permission_error", "not_recorded",
                        "a replay cannot open a tunnel: TLS end to end was not recorded");
        return;
    }
    struct eph_buf body;
    memset(&body, 0, sizeof(body));
    if (bk_read_body(rc, req, after_head, nafter, &body)) {
        eph_buf_release(&body);
        return;
    }
    eph_buf_release(&body);
    if (!rc->url.data) {
        /* Its URL could not be made (out of memory): not a request missing from the recording. */
        bk_answer_error(rc, 502, "api_error", "broker_error",
                        "the broker could not match the request");
        return;
    }
    json_t *rs = bk_replay_claim(b, rc->method, rc->url.data, rc->req_sha);
    if (!rs) {
        bk_answer_error(rc, 403, "permission_error", "not_recorded",
                        "this request is not in the recording the run replays");
        return;
    }
    int status = (int)json_integer_value(json_object_get(rs, "status"));
    const char *b64 = json_string_value(json_object_get(rs, "body_base64"));
    size_t blen = b64 ? strlen(b64) : 0, n = 0;
    unsigned char *data = malloc(blen / 4 * 3 + 3);
    if (!data) {
        bk_answer_error(rc, 502, "api_error", "broker_error",
                        "the broker could not relay the recorded answer");
        return;
    }
    if (sodium_base642bin(data, blen / 4 * 3 + 3, b64 ? b64 : "", blen, NULL, &n, NULL,
                          sodium_base64_VARIANT_ORIGINAL)) {
        free(data);
        bk_answer_error(rc, 502, "api_error", "bad_recording", "the recorded answer is malformed");
        return;
    }
    struct eph_buf head;
    eph_buf_init(&head, EPH_HTTP_MAX_HEAD);
    int r = eph_buf_appendf(&head, "HTTP/1.1 %d %s\r\n", status, bk_reason_phrase(status));
    size_t i;
    json_t *pair;
    json_array_foreach(json_object_get(rs, "headers"), i, pair)
    {
        const char *k = json_string_value(json_array_get(pair, 0));
        const char *v = json_string_value(json_array_get(pair, 1));
        if (r || !k || !v || strcasecmp(k, "content-length") == 0 ||
            strcasecmp(k, "transfer-encoding") == 0 || strcasecmp(k, "connection") == 0 ||
            strpbrk(k, "\r\n:") || strpbrk(v, "\r\n"))
            continue;
        r = eph_buf_appendf(&head, "%s: %s\r\n", k, v);
    }
    if (!r)
        r = eph_buf_appendf(&head, "Content-Length: %zu\r\nConnection: close\r\n\r\n", n);
    if (r == -ENOMEM) {
        bk_answer_error(rc, 502, "api_error", "broker_error",
                        "the broker could not relay the recorded answer");
    } else if (r) { /* its head is over the cap */
        bk_answer_error(rc, 502, "api_error", "bad_recording", "the recorded answer is malformed");
    } else {
        rc->ev.status = status;
        if (bk_to_program(rc, head.data, head.len) == 0) {
            rc->ev.bytes_down += head.len;
            if (bk_to_program(rc, data, n) == 0)
                rc->ev.bytes_down += n;
        }
    }
    eph_buf_release(&head);
    free(data);
}
