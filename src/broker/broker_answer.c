/*
 * broker_answer.c - one run's broker: I/O with deadlines, and the answers of the broker's own (its
 * errors, a refused request) to the program in the sandbox. See docs/BROKER.md.
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
#include "guest/protocol.h"

/* ---- I/O with deadlines ----------------------------------------------------------------- */

/* The program's side of a stream, watched by every wait of its thread: when the sandbox resets the
 * stream (or the tunnel ends) the host end of the pair is closed and fd reports POLLHUP; when the
 * broker closes, it shuts fd itself. Until the thread has shut fd for writing itself, a hang-up
 * can only mean that the program is gone (a half close from the program is POLLIN, end of
 * file). */
bool bk_watch_program(const struct bstream *s)
{
    return s && s->fd >= 0 && !s->fd_shut;
}

/* Whether the stream's work must stop now: its program is gone, or the broker closes. */
bool bk_stream_gone(const struct bstream *s)
{
    if (!s)
        return false;
    if (atomic_load(&s->b->closing))
        return true;
    if (!bk_watch_program(s))
        return false;
    struct pollfd p = {.fd = s->fd, .events = 0};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR | POLLNVAL));
}

/* Waits for ev on fd until the deadline, or -ECANCELED as soon as the stream is gone. */
int bk_wait_fd(const struct bstream *s, int fd, short ev, uint64_t deadline_ns)
{
    for (;;) {
        if (bk_stream_gone(s))
            return -ECANCELED;
        uint64_t now = eph_clock_mono_ns();
        if (now >= deadline_ns)
            return -ETIMEDOUT;
        uint64_t ms = (deadline_ns - now) / 1000000u + 1;
        struct pollfd p[2] = {{.fd = fd, .events = ev},
                              {.fd = bk_watch_program(s) && s->fd != fd ? s->fd : -1}};
        int n = poll(p, 2, ms > 60000 ? 60000 : (int)ms);
        if (n < 0 && errno != EINTR)
            return -errno;
        if (n > 0 && p[0].revents)
            return 0;
    }
}

int bk_write_all(const struct bstream *s, int fd, const void *data, size_t n, uint64_t deadline_ns)
{
    const char *p = data;
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno != EAGAIN)
            return -errno;
        int rc = bk_wait_fd(s, fd, POLLOUT, deadline_ns);
        if (rc)
            return rc;
    }
    return 0;
}

/* Reads at most n bytes: > 0, 0 at end of stream, or a negative error. */
ssize_t bk_read_some(const struct bstream *s, int fd, void *buf, size_t n, uint64_t deadline_ns)
{
    for (;;) {
        ssize_t r = recv(fd, buf, n, MSG_DONTWAIT);
        if (r >= 0)
            return r;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN)
            return -errno;
        int rc = bk_wait_fd(s, fd, POLLIN, deadline_ns);
        if (rc)
            return rc;
    }
}

/* ---- answers of the broker's own ---------------------------------------------------------- */

/* The answer to the program: written, counted by the caller, and kept for the record. */
int bk_to_program(struct req_ctx *rc, const void *data, size_t n)
{
    if (rc->recording && !rc->tunnel && !rc->down_cut) {
        size_t room = rc->down.max - rc->down.len, k = n < room ? n : room;
        if (k < n)
            rc->down_cut = true;
        else if (eph_buf_append(&rc->down, data, k))
            rc->record_lost = true;
    }
    return bk_write_all(rc->s, rc->s->fd, data, n, rc->deadline_ns);
}

void bk_sha256_hex(const void *data, size_t n, char out[65])
{
    unsigned char h[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(h, data, n);
    sodium_bin2hex(out, 65, h, sizeof(h));
}

/* The request body, whole, for the record: its hash and its first bytes. */
void bk_record_request_body(struct req_ctx *rc, const char *data, size_t n)
{
    bk_sha256_hex(data, n, rc->req_sha);
    if (rc->recording) {
        size_t k = n < rc->req_body.max ? n : rc->req_body.max;
        if (eph_buf_append(&rc->req_body, data, k))
            rc->record_lost = true;
    }
}

const char *bk_reason_phrase(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 204:
        return "No Content";
    case 301:
        return "Moved Permanently";
    case 302:
        return "Found";
    case 304:
        return "Not Modified";
    case 401:
        return "Unauthorized";
    case 404:
        return "Not Found";
    case 500:
        return "Internal Server Error";
    case 400:
        return "Bad Request";
    case 402:
        return "Payment Required";
    case 403:
        return "Forbidden";
    case 411:
        return "Length Required";
    case 413:
        return "Content Too Large";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    }
    return "Error";
}

/* Answers the program with the JSON error of docs/BROKER.md, and records the refusal. */
void bk_answer_error(struct req_ctx *rc, int status, const char *type, const char *code,
                     const char *message)
{
    char body[512], head[256];
    int bn = snprintf(body, sizeof(body),
                      "{\"error\": {\"type\": \"%s\", \"code\": \"%s\", \"message\": \"%s\"}}\n",
                      type, code, message);
    int hn = snprintf(head, sizeof(head),
                      "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                      "Connection: close\r\n\r\n",
                      status, bk_reason_phrase(status), bn);
    (void)bk_to_program(rc, head, (size_t)hn);
    (void)bk_to_program(rc, body, (size_t)bn);
    rc->ev.status = status;
    if (status == 403 || status == 402 || status == 400 || status == 411 || status == 413)
        rc->ev.denied = code;
}

json_t *bk_b64_json(const char *data, size_t n)
{
    size_t cap = sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL);
    char *t = malloc(cap);
    if (!t)
        return NULL;
    sodium_bin2base64(t, cap, (const unsigned char *)data, n, sodium_base64_VARIANT_ORIGINAL);
    json_t *s = json_string(t);
    free(t);
    return s;
}

int bk_header_json(const char *name, size_t name_len, const char *value, size_t value_len,
                   json_t **out)
{
    *out = NULL;
    if (!eph_proto_utf8_valid(name, name_len) || !eph_proto_utf8_valid(value, value_len))
        return 1;
    *out = json_pack("[s%, s%]", name, name_len, value, value_len);
    return *out ? 0 : -ENOMEM;
}

int bk_header_pair(const char *line, size_t n, json_t **out)
{
    const char *colon = memchr(line, ':', n);
    *out = NULL;
    if (!colon)
        return 1;
    const char *v = colon + 1, *end = line + n;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    return bk_header_json(line, (size_t)(colon - line), v, (size_t)(end - v), out);
}

/* The response part of the record, from what the program got: status line, headers, body (a
 * chunked body de-chunked, so that a replay can answer it with a Content-Length). NULL when a part
 * of it cannot be made. */
static json_t *record_response(struct req_ctx *rc)
{
    const char *d = rc->down.data ? rc->down.data : "";
    size_t n = rc->down.len;
    const char *end = n >= 4 ? memmem(d, n, "\r\n\r\n", 4) : NULL;
    json_t *headers = json_array();
    if (!headers)
        return NULL;
    bool chunked = false;
    size_t body_at = n;
    if (end) {
        const char *line = memchr(d, '\n', (size_t)(end - d) + 2);
        while (line && line + 1 < end + 2) {
            const char *next = memchr(line + 1, '\r', (size_t)(end + 2 - (line + 1)));
            if (!next)
                break;
            json_t *pair;
            int r = bk_header_pair(line + 1, (size_t)(next - line - 1), &pair);
            if (r < 0 || (!r && json_array_append_new(headers, pair))) {
                json_decref(headers);
                return NULL;
            }
            if (!r)
                chunked |= strcasecmp(json_string_value(json_array_get(pair, 0)),
                                      "transfer-encoding") == 0 &&
                           strcasecmp(json_string_value(json_array_get(pair, 1)), "chunked") == 0;
            line = next + 1;
        }
        body_at = (size_t)(end - d) + 4;
    }
    size_t blen = n - body_at, max = (size_t)rc->s->b->s.record_body_max_bytes;
    bool cut = rc->down_cut || !end;
    char *body = malloc(blen + 1);
    if (!body) {
        json_decref(headers);
        return NULL;
    }
    if (blen)
        memcpy(body, d + body_at, blen);
    if (chunked) {
        struct eph_http_chunked ch = {0};
        size_t used;
        if (eph_http_chunked_decode(&ch, body, blen, &blen, &used) < 0)
            blen = 0;
    }
    if (blen > max) {
        blen = max;
        cut = true;
    }
    json_t *o = json_pack("{s:i, s:o, s:o, s:b}", "status", rc->ev.status, "headers", headers,
                          "body_base64", bk_b64_json(body, blen), "truncated", cut);
    free(body);
    return o;
}

static json_t *record_exchange(struct req_ctx *rc)
{
    const char *url = rc->url.data ? rc->url.data : "";
    if (rc->tunnel)
        return json_pack("{s:{s:s, s:s}, s:{s:i}}", "request", "method", rc->method, "url", url,
                         "response", "status", rc->ev.status);
    if (!rc->req_sha[0])
        bk_sha256_hex("", 0, rc->req_sha);
    json_t *req = json_pack(
        "{s:s, s:s, s:O, s:o, s:s}", "method", rc->method, "url", url, "headers", rc->req_headers,
        "body_base64", bk_b64_json(rc->req_body.data ? rc->req_body.data : "", rc->req_body.len),
        "body_sha256", rc->req_sha);
    return json_pack("{s:o, s:o}", "request", req, "response", record_response(rc));
}

/* Whether name is one of the run's connections (broker/event.h). */
static bool knows_conn(void *arg, const char *name)
{
    const struct eph_broker *b = arg;
    for (size_t i = 0; i < b->nconns; i++)
        if (strcmp(b->conns[i].name, name) == 0)
            return true;
    return false;
}

void bk_emit(struct req_ctx *rc)
{
    struct eph_broker *b = rc->s->b;
    rc->ev.duration_ms = (eph_clock_mono_ns() - rc->start_ns) / 1000000u;
    pthread_mutex_lock(&b->lock);
    rc->ev.cost_micros = rc->s->meter.charged;
    if (rc->ev.connection)
        b->conn_count++;
    else
        b->web_count++;
    pthread_mutex_unlock(&b->lock);
    if (!rc->ev.method)
        rc->ev.method = rc->method;
    if (!rc->ev.host)
        rc->ev.host = rc->host;
    if (!rc->ev.path)
        rc->ev.path = rc->path;
    if (!rc->ev.scheme)
        rc->ev.scheme = "http";
    if (rc->recording && !b->zdr) {
        rc->ev.exchange = rc->record_lost ? NULL : record_exchange(rc);
        if (!rc->ev.exchange)
            EPH_ERROR(COMPONENT, "cannot keep the record of a %s request: out of memory",
                      rc->method);
    }
    if (b->zdr) {
        json_decref(rc->ev.exchange); /* web_fetch's hops come with one */
        rc->ev.exchange = NULL;
        eph_broker_event_scrub(&rc->ev, knows_conn, b);
    }
    if (b->on_event)
        b->on_event(b->event_arg, &rc->ev);
    json_decref(rc->ev.exchange);
    rc->ev.exchange = NULL;
}
