/*
 * broker.c - one run's broker. See broker.h and docs/BROKER.md.
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

#define COMPONENT "broker"
#define IO_CHUNK 65536

struct conn_copy {
    char *name, *base_url;
    char **methods, **prefixes, **hnames, **hvalues, **qnames, **qvalues;
    size_t nmethods, nprefixes, nheaders, nquery;
};

/* One recorded exchange a replay may answer with. */
struct replay_entry {
    char *method, *url;
    char sha[65];
    json_t *response; /* {"status", "headers", "body_base64", ...} */
    bool used;
};

struct bstream {
    struct eph_broker *b;
    uint32_t id;
    int fd;                 /* the program's connection; closed by the thread */
    int up;                 /* the upstream socket of web requests, or -1 */
    struct eph_meter meter; /* under b->lock */
    bool no_budget;         /* the fee did not fit */
    bool fd_shut;           /* the thread shut fd for writing (the upstream's answer ended) */
    bool done;              /* the thread has finished */
    bool joined;            /* and was joined (by the tunnel's thread): its slot is free */
    pthread_t thread;
    struct bstream *next;
};

struct eph_broker {
    struct eph_broker_settings s;
    bool web;
    char **web_allow;
    size_t nweb_allow;
    struct conn_copy *conns;
    size_t nconns;
    struct eph_budget *budget;
    eph_broker_event_fn on_event;
    void *event_arg;
    pthread_mutex_t lock;      /* streams, meters, counters */
    pthread_mutex_t reap_lock; /* joining stream threads: the tunnel's thread or close */
    struct bstream *streams;
    atomic_bool closing;
    atomic_bool exhausted;
    uint64_t web_count, conn_count;
    bool record;
    bool zdr;                    /* events keep nothing the sandbox chose (broker/event.h) */
    struct replay_entry *replay; /* replay mode when not NULL; used flags under lock */
    size_t nreplay;
};

/* ---- set-up ------------------------------------------------------------------------------- */

const char *eph_broker_web_allowed(const struct eph_broker *b, size_t i)
{
    return b && i < b->nweb_allow ? b->web_allow[i] : NULL;
}

size_t eph_broker_conn_count(const struct eph_broker *b)
{
    return b ? b->nconns : 0;
}

bool eph_broker_conn_rules(const struct eph_broker *b, size_t i, struct eph_broker_conn_rules *out)
{
    if (!b || i >= b->nconns)
        return false;
    const struct conn_copy *c = &b->conns[i];
    *out = (struct eph_broker_conn_rules){.name = c->name,
                                          .methods = (const char *const *)c->methods,
                                          .nmethods = c->nmethods,
                                          .prefixes = (const char *const *)c->prefixes,
                                          .nprefixes = c->nprefixes};
    return true;
}

void eph_broker_settings_default(struct eph_broker_settings *s)
{
    memset(s, 0, sizeof(*s));
    s->max_request_bytes = 10u << 20;
    s->max_response_bytes = 50u << 20;
    s->request_timeout_seconds = 60;
    s->max_tunnels_per_run = 16;
    s->micros_per_request = 100;
    s->micros_per_mib = 50;
    s->record_body_max_bytes = 256u << 10;
}

static char **copy_strv(const char *const *v, size_t n)
{
    char **out = calloc(n + 1, sizeof(char *));
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        out[i] = strdup(v[i]);
        if (!out[i]) {
            for (size_t k = 0; k < i; k++)
                free(out[k]);
            free(out);
            return NULL;
        }
    }
    return out;
}

/* Frees a copied vector, wiping it first (credentials). */
static void free_strv(char **v, size_t n)
{
    if (!v)
        return;
    for (size_t i = 0; i < n; i++) {
        if (v[i]) {
            sodium_memzero(v[i], strlen(v[i]));
            free(v[i]);
        }
    }
    free(v);
}

static void conn_release(struct conn_copy *c)
{
    free(c->name);
    free(c->base_url);
    free_strv(c->methods, c->nmethods);
    free_strv(c->prefixes, c->nprefixes);
    free_strv(c->hnames, c->nheaders);
    free_strv(c->hvalues, c->nheaders);
    free_strv(c->qnames, c->nquery);
    free_strv(c->qvalues, c->nquery);
}

int eph_broker_new(const struct eph_broker_settings *settings, const struct eph_broker_run *run,
                   struct eph_broker **out)
{
    struct eph_broker *b = calloc(1, sizeof(*b));
    if (!b)
        return -ENOMEM;
    b->s = *settings;
    b->s.extra_ca_file = settings->extra_ca_file ? strdup(settings->extra_ca_file) : NULL;
    b->web = run->web;
    b->record = run->record;
    b->zdr = run->zdr;
    b->budget = run->budget;
    b->on_event = run->on_event;
    b->event_arg = run->event_arg;
    pthread_mutex_init(&b->lock, NULL);
    pthread_mutex_init(&b->reap_lock, NULL);
    b->nweb_allow = run->nweb_allow;
    b->web_allow = copy_strv(run->web_allow, run->nweb_allow);
    b->conns = calloc(run->nconns + 1, sizeof(*b->conns));
    if (!b->web_allow || !b->conns)
        goto nomem;
    for (size_t i = 0; i < run->nconns; i++) {
        const struct eph_broker_conn *in = &run->conns[i];
        struct conn_copy *c = &b->conns[i];
        b->nconns++;
        c->name = strdup(in->name);
        c->base_url = strdup(in->base_url);
        c->nmethods = in->nmethods;
        c->nprefixes = in->nprefixes;
        c->nheaders = in->nheaders;
        c->nquery = in->nquery;
        c->methods = copy_strv(in->methods, in->nmethods);
        c->prefixes = copy_strv(in->prefixes, in->nprefixes);
        c->hnames = copy_strv(in->header_names, in->nheaders);
        c->hvalues = copy_strv(in->header_values, in->nheaders);
        c->qnames = copy_strv(in->query_names, in->nquery);
        c->qvalues = copy_strv(in->query_values, in->nquery);
        if (!c->name || !c->base_url || !c->methods || !c->prefixes || !c->hnames || !c->hvalues ||
            !c->qnames || !c->qvalues)
            goto nomem;
    }
    *out = b;
    return 0;
nomem:
    eph_broker_free(b);
    return -ENOMEM;
}

void eph_broker_close(struct eph_broker *b)
{
    if (!b)
        return;
    atomic_store(&b->closing, true);
    pthread_mutex_lock(&b->lock);
    for (struct bstream *s = b->streams; s; s = s->next) {
        if (!s->done) {
            shutdown(s->fd, SHUT_RDWR);
            if (s->up >= 0)
                shutdown(s->up, SHUT_RDWR);
        }
    }
    pthread_mutex_unlock(&b->lock);
    pthread_mutex_lock(&b->reap_lock);
    for (;;) {
        pthread_mutex_lock(&b->lock);
        struct bstream *s = b->streams;
        if (s)
            b->streams = s->next;
        pthread_mutex_unlock(&b->lock);
        if (!s)
            break;
        if (!s->joined)
            pthread_join(s->thread, NULL);
        free(s);
    }
    pthread_mutex_unlock(&b->reap_lock);
}

void eph_broker_free(struct eph_broker *b)
{
    if (!b)
        return;
    eph_broker_close(b);
    free_strv(b->web_allow, b->nweb_allow);
    for (size_t i = 0; i < b->nconns; i++)
        conn_release(&b->conns[i]);
    free(b->conns);
    free((char *)b->s.extra_ca_file);
    for (size_t i = 0; i < b->nreplay; i++) {
        free(b->replay[i].method);
        free(b->replay[i].url);
        json_decref(b->replay[i].response);
    }
    free(b->replay);
    pthread_mutex_destroy(&b->lock);
    pthread_mutex_destroy(&b->reap_lock);
    free(b);
}

bool eph_broker_exhausted(struct eph_broker *b)
{
    return b && atomic_load(&b->exhausted);
}

void eph_broker_counts(struct eph_broker *b, uint64_t *web, uint64_t *connection)
{
    pthread_mutex_lock(&b->lock);
    *web = b->web_count;
    *connection = b->conn_count;
    pthread_mutex_unlock(&b->lock);
}

/* ---- the worker's side: streams open, bytes metered ------------------------------------ */

static void *serve(void *arg);

/* Joins the threads of the streams that are over, so that a run of many requests does not keep
 * one finished thread (and its stack) per request until its end. The stream itself stays listed:
 * bytes it wrote may still be crossing the tunnel, and they are metered on its meter.
 * eph_broker_close, perhaps on another thread, takes reap_lock too and skips the joined ones. */
static void reap_done(struct eph_broker *b)
{
    pthread_mutex_lock(&b->reap_lock);
    for (;;) {
        struct bstream *found = NULL;
        pthread_mutex_lock(&b->lock);
        for (struct bstream *s = b->streams; s && !found; s = s->next)
            if (s->done && !s->joined)
                found = s;
        pthread_mutex_unlock(&b->lock);
        if (!found)
            break;
        pthread_join(found->thread, NULL); /* it has set done: its last step */
        found->joined = true;
    }
    pthread_mutex_unlock(&b->reap_lock);
}

/* The streams whose thread may still run: each holds a slot of the run's tunnel cap until it
 * has been joined, so a stream the sandbox reset keeps its slot until its thread has let go of
 * everything (its upstream socket, its curl handle) and exited. */
static size_t streams_held(struct eph_broker *b)
{
    size_t n = 0;
    pthread_mutex_lock(&b->lock);
    for (struct bstream *s = b->streams; s; s = s->next)
        n += !s->joined;
    pthread_mutex_unlock(&b->lock);
    return n;
}

static void refuse_busy(struct eph_broker *b, int fd);

int eph_broker_on_stream(void *arg, uint32_t stream, int fd)
{
    struct eph_broker *b = arg;
    EPH_AUTOCLOSE int owned = fd; /* the stream's thread takes it; closed here if none does */
    if (atomic_load(&b->closing))
        return -ECANCELED;
    reap_done(b);
    /* Only this thread adds streams, so the count cannot grow behind the check. */
    if (streams_held(b) >= b->s.max_tunnels_per_run) {
        refuse_busy(b, fd);
        return 0;
    }
    EPH_AUTOFREE struct bstream *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->b = b;
    s->id = stream;
    s->fd = fd;
    s->up = -1;
    eph_meter_init(&s->meter, b->s.micros_per_request, b->s.micros_per_mib);
    /* The fee, before a byte goes anywhere (the budget locks itself; the stream is not listed
     * yet, so its meter is this thread's alone). */
    int fee = b->budget ? eph_meter_start(&s->meter, b->budget, eph_clock_mono_ns()) : 0;
    if (fee != 0) {
        s->no_budget = true;
        atomic_store(&b->exhausted, true);
    }
    pthread_mutex_lock(&b->lock);
    s->next = b->streams;
    b->streams = s;
    int rc = pthread_create(&s->thread, NULL, serve, s);
    if (rc) {
        b->streams = s->next;
        pthread_mutex_unlock(&b->lock);
        return -rc;
    }
    /* The thread owns both now (and may already have freed the stream). */
    eph_steal_ptr(&s);
    eph_steal_fd(&owned);
    pthread_mutex_unlock(&b->lock);
    return 0;
}

size_t eph_broker_on_bytes(void *arg, uint32_t stream, size_t n)
{
    struct eph_broker *b = arg;
    if (!b->budget || atomic_load(&b->closing))
        return n; /* nothing reaches an upstream any more */
    size_t k = n;
    /* The broker's lock guards the list and the stream's meter (emit reads it); the budget,
     * charged from other threads too, locks itself. */
    pthread_mutex_lock(&b->lock);
    for (struct bstream *s = b->streams; s; s = s->next) {
        if (s->id != stream)
            continue;
        /* A stream refused for its fee carries only the broker's 402: free, like a denial. */
        if (!s->no_budget)
            k = eph_meter_take(&s->meter, b->budget, eph_clock_mono_ns(), n);
        break;
    }
    pthread_mutex_unlock(&b->lock);
    if (k < n)
        atomic_store(&b->exhausted, true);
    return k;
}

/* ---- I/O with deadlines ----------------------------------------------------------------- */

/* The program's side of a stream, watched by every wait of its thread: when the sandbox resets the
 * stream (or the tunnel ends) the host end of the pair is closed and fd reports POLLHUP; when the
 * broker closes, it shuts fd itself. Until the thread has shut fd for writing itself, a hang-up
 * can only mean that the program is gone (a half close from the program is POLLIN, end of
 * file). */
static bool watch_program(const struct bstream *s)
{
    return s && s->fd >= 0 && !s->fd_shut;
}

/* Whether the stream's work must stop now: its program is gone, or the broker closes. */
static bool stream_gone(const struct bstream *s)
{
    if (!s)
        return false;
    if (atomic_load(&s->b->closing))
        return true;
    if (!watch_program(s))
        return false;
    struct pollfd p = {.fd = s->fd, .events = 0};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR | POLLNVAL));
}

/* Waits for ev on fd until the deadline, or -ECANCELED as soon as the stream is gone. */
static int wait_fd(const struct bstream *s, int fd, short ev, uint64_t deadline_ns)
{
    for (;;) {
        if (stream_gone(s))
            return -ECANCELED;
        uint64_t now = eph_clock_mono_ns();
        if (now >= deadline_ns)
            return -ETIMEDOUT;
        uint64_t ms = (deadline_ns - now) / 1000000u + 1;
        struct pollfd p[2] = {{.fd = fd, .events = ev},
                              {.fd = watch_program(s) && s->fd != fd ? s->fd : -1}};
        int n = poll(p, 2, ms > 60000 ? 60000 : (int)ms);
        if (n < 0 && errno != EINTR)
            return -errno;
        if (n > 0 && p[0].revents)
            return 0;
    }
}

static int write_all(const struct bstream *s, int fd, const void *data, size_t n,
                     uint64_t deadline_ns)
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
        int rc = wait_fd(s, fd, POLLOUT, deadline_ns);
        if (rc)
            return rc;
    }
    return 0;
}

/* Reads at most n bytes: > 0, 0 at end of stream, or a negative error. */
static ssize_t read_some(const struct bstream *s, int fd, void *buf, size_t n, uint64_t deadline_ns)
{
    for (;;) {
        ssize_t r = recv(fd, buf, n, MSG_DONTWAIT);
        if (r >= 0)
            return r;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN)
            return -errno;
        int rc = wait_fd(s, fd, POLLIN, deadline_ns);
        if (rc)
            return rc;
    }
}

/* ---- answers of the broker's own ---------------------------------------------------------- */

struct req_ctx {
    struct bstream *s;
    uint64_t start_ns, deadline_ns;
    struct eph_broker_event ev;
    char host[EPH_HOST_NAME_MAX];
    char method[32];
    char path[EPH_BROKER_PATH_MAX];
    /* The record of the exchange (when the broker keeps one): the request as the broker saw it,
     * what the program got back (capped: head and record_body_max_bytes of body). */
    bool recording, tunnel;
    struct eph_buf url;
    json_t *req_headers;
    struct eph_buf req_body; /* the first record_body_max_bytes */
    char req_sha[65];        /* of the whole body */
    struct eph_buf down;
    bool down_cut;
};

/* The answer to the program: written, counted by the caller, and kept for the record. */
static int to_program(struct req_ctx *rc, const void *data, size_t n)
{
    if (rc->recording && !rc->tunnel && !rc->down_cut) {
        size_t room = rc->down.max - rc->down.len, k = n < room ? n : room;
        if (k < n || eph_buf_append(&rc->down, data, k))
            rc->down_cut = true;
    }
    return write_all(rc->s, rc->s->fd, data, n, rc->deadline_ns);
}

static void sha256_hex(const void *data, size_t n, char out[65])
{
    unsigned char h[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(h, data, n);
    sodium_bin2hex(out, 65, h, sizeof(h));
}

/* The request body, whole, for the record: its hash and its first bytes. */
static void record_request_body(struct req_ctx *rc, const char *data, size_t n)
{
    sha256_hex(data, n, rc->req_sha);
    if (rc->recording) {
        size_t k = n < rc->req_body.max ? n : rc->req_body.max;
        if (eph_buf_append(&rc->req_body, data, k))
            eph_buf_release(&rc->req_body);
    }
}

static const char *reason_phrase(int status)
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

/* Answers the program with SPEC 7's JSON error, and records the refusal. */
static void answer_error(struct req_ctx *rc, int status, const char *type, const char *code,
                         const char *message)
{
    char body[512], head[256];
    int bn = snprintf(body, sizeof(body),
                      "{\"error\": {\"type\": \"%s\", \"code\": \"%s\", \"message\": \"%s\"}}\n",
                      type, code, message);
    int hn = snprintf(head, sizeof(head),
                      "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                      "Connection: close\r\n\r\n",
                      status, reason_phrase(status), bn);
    (void)to_program(rc, head, (size_t)hn);
    (void)to_program(rc, body, (size_t)bn);
    rc->ev.status = status;
    if (status == 403 || status == 402 || status == 400 || status == 411 || status == 413)
        rc->ev.denied = code;
}

static json_t *b64_json(const char *data, size_t n)
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

/* A header line "Name: value" as [name, value], or NULL when it is not one (or not UTF-8). */
static json_t *header_pair(const char *line, size_t n)
{
    const char *colon = memchr(line, ':', n);
    if (!colon)
        return NULL;
    const char *v = colon + 1, *end = line + n;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    return json_pack("[s%, s%]", line, (size_t)(colon - line), v, (size_t)(end - v));
}

/* The response part of the record, from what the program got: status line, headers, body (a
 * chunked body de-chunked, so that a replay can answer it with a Content-Length). */
static json_t *record_response(struct req_ctx *rc)
{
    const char *d = rc->down.data ? rc->down.data : "";
    size_t n = rc->down.len;
    const char *end = n >= 4 ? memmem(d, n, "\r\n\r\n", 4) : NULL;
    json_t *headers = json_array();
    bool chunked = false;
    size_t body_at = n;
    if (end) {
        const char *line = memchr(d, '\n', (size_t)(end - d) + 2);
        while (line && line + 1 < end + 2) {
            const char *next = memchr(line + 1, '\r', (size_t)(end + 2 - (line + 1)));
            if (!next)
                break;
            json_t *pair = header_pair(line + 1, (size_t)(next - line - 1));
            if (pair) {
                chunked |= strcasecmp(json_string_value(json_array_get(pair, 0)),
                                      "transfer-encoding") == 0 &&
                           strcasecmp(json_string_value(json_array_get(pair, 1)), "chunked") == 0;
                json_array_append_new(headers, pair);
            }
            line = next + 1;
        }
        body_at = (size_t)(end - d) + 4;
    }
    size_t blen = n - body_at, max = (size_t)rc->s->b->s.record_body_max_bytes;
    bool cut = rc->down_cut || !end;
    char *body = malloc(blen + 1);
    if (body && blen)
        memcpy(body, d + body_at, blen);
    if (body && chunked) {
        struct eph_http_chunked ch = {0};
        size_t used;
        if (eph_http_chunked_decode(&ch, body, blen, &blen, &used) < 0)
            blen = 0;
    }
    if (blen > max) {
        blen = max;
        cut = true;
    }
    json_t *o =
        json_pack("{s:i, s:o, s:o, s:b}", "status", rc->ev.status, "headers", headers,
                  "body_base64", b64_json(body ? body : "", body ? blen : 0), "truncated", cut);
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
        sha256_hex("", 0, rc->req_sha);
    json_t *req =
        json_pack("{s:s, s:s, s:o, s:o, s:s}", "method", rc->method, "url", url, "headers",
                  rc->req_headers ? json_incref(rc->req_headers) : json_array(), "body_base64",
                  b64_json(rc->req_body.data ? rc->req_body.data : "", rc->req_body.len),
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

static void emit(struct req_ctx *rc)
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
    if (rc->recording && rc->url.data && !b->zdr)
        rc->ev.exchange = record_exchange(rc);
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

/* ---- the SSRF guard around a resolver (guard.h) ------------------------------------------ */

/* What a web request (broker.web_private_cidrs) or a connection (broker.allow_private_cidrs) may
 * reach; never the server's own sockets. */
static struct eph_guard guard_of(const struct eph_broker *b, bool web)
{
    return (struct eph_guard){.allow = web ? b->s.web_private : b->s.allow_private,
                              .nallow = web ? b->s.nweb_private : b->s.nallow_private,
                              .own = &b->s.own};
}

/* The message of a refused address (eph_guard_resolve's -EACCES or -EPERM). */
static void refusal_text(int r, enum eph_addr_class cls, char *msg, size_t len)
{
    if (r == -EPERM)
        snprintf(msg, len, "the address is the server's own");
    else
        snprintf(msg, len, "the address is not public (%s)", eph_addr_class_name(cls));
}

/* Connects to exactly the address checked. */
static int connect_to(const struct bstream *s, const struct eph_addr *a, unsigned port,
                      uint64_t deadline_ns, int *out)
{
    struct sockaddr_storage ss;
    socklen_t len;
    memset(&ss, 0, sizeof(ss));
    if (a->family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&ss;
        in->sin_family = AF_INET;
        in->sin_port = htons((uint16_t)port);
        memcpy(&in->sin_addr, a->bytes, 4);
        len = sizeof(*in);
    } else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        memcpy(&in6->sin6_addr, a->bytes, 16);
        len = sizeof(*in6);
    }
    int fd = socket(a->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&ss, len) != 0 && errno != EINPROGRESS) {
        int e = errno;
        close(fd);
        return -e;
    }
    int rc = wait_fd(s, fd, POLLOUT, deadline_ns);
    int err = 0;
    socklen_t el = sizeof(err);
    if (!rc && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err)
        rc = -err;
    if (rc) {
        close(fd);
        return rc;
    }
    /* The broker writes what it has when it has it (a head, then a body; a relayed read): no
     * Nagle wait for an ACK the upstream may delay. */
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    /* out is the stream's upstream socket, which eph_broker_close shuts under the lock. */
    pthread_mutex_lock(&s->b->lock);
    *out = fd;
    pthread_mutex_unlock(&s->b->lock);
    return 0;
}

/* Resolves, guards and connects for a web request; answers the program on failure. */
static int web_connect(struct req_ctx *rc, const struct eph_http_authority *auth)
{
    struct eph_broker *b = rc->s->b;
    snprintf(rc->host, sizeof(rc->host), "%s", auth->host.name);
    rc->ev.port = auth->port;
    if (b->nweb_allow && !eph_policy_domain_allowed(
                             auth->host.name, (const char *const *)b->web_allow, b->nweb_allow)) {
        answer_error(rc, 403, "permission_error", "host_not_allowed",
                     "this run may not reach that host");
        return -EACCES;
    }
    struct eph_addr a;
    enum eph_addr_class cls;
    struct eph_guard g = guard_of(b, true);
    int r = eph_guard_resolve(&g, &auth->host, auth->port, &a, &cls);
    if (r == -EACCES || r == -EPERM) {
        char msg[128];
        refusal_text(r, cls, msg, sizeof(msg));
        answer_error(rc, 403, "permission_error", "address_not_allowed", msg);
        return r;
    }
    if (r) {
        answer_error(rc, 502, "api_error", "dns_failed", "the host name does not resolve");
        return r;
    }
    r = connect_to(rc->s, &a, auth->port, rc->deadline_ns, &rc->s->up);
    if (r) {
        answer_error(rc, r == -ETIMEDOUT ? 504 : 502, "api_error", "connect_failed",
                     "cannot connect to the upstream");
        return r;
    }
    return 0;
}

/* Relays both ways until both sides are done, the time is up or a write fails. The first
 * response line seen from upstream sets the event's status (when parse_status). */
/* A relay moves up to this much per system call: on a machine where every wake-up is dear (a VM),
 * fewer, larger reads carry a bulk transfer with fewer of them. */
#define RELAY_CHUNK (4 * IO_CHUNK)

static void relay(struct req_ctx *rc, const char *pending, size_t npending, bool parse_status,
                  bool upward)
{
    int fd = rc->s->fd, up = rc->s->up;
    char *buf = malloc(RELAY_CHUNK);
    bool down_open = true, up_open = upward;
    char status_line[16];
    size_t status_have = 0;
    if (!buf)
        return;
    if (npending && write_all(rc->s, up, pending, npending, rc->deadline_ns) == 0)
        rc->ev.bytes_up += npending;
    /* A request whose body the broker forwarded already (!upward) reads the answer only. */
    while (down_open || up_open) {
        /* The program's side is polled even when nothing more is read from it: its hang-up (a
         * reset from the sandbox) ends the relay at once. */
        struct pollfd p[2] = {
            {.fd = up_open || watch_program(rc->s) ? fd : -1, .events = up_open ? POLLIN : 0},
            {.fd = down_open ? up : -1, .events = POLLIN}};
        uint64_t now = eph_clock_mono_ns();
        if (now >= rc->deadline_ns || atomic_load(&rc->s->b->closing))
            break;
        uint64_t ms = (rc->deadline_ns - now) / 1000000u + 1;
        int n = poll(p, 2, ms > 60000 ? 60000 : (int)ms);
        if (n < 0 && errno != EINTR)
            break;
        if (n <= 0)
            continue;
        if (watch_program(rc->s) && (p[0].revents & (POLLHUP | POLLERR)))
            break; /* the program is gone: what it sent last goes nowhere */
        if (up_open && p[0].revents) {
            ssize_t r = recv(fd, buf, RELAY_CHUNK, MSG_DONTWAIT);
            if (r > 0) {
                if (write_all(rc->s, up, buf, (size_t)r, rc->deadline_ns))
                    break;
                rc->ev.bytes_up += (uint64_t)r;
            } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
                up_open = false;
                shutdown(up, SHUT_WR);
            }
        }
        if (p[1].revents) {
            ssize_t r = recv(up, buf, RELAY_CHUNK, MSG_DONTWAIT);
            if (r > 0) {
                if (parse_status && status_have < sizeof(status_line)) {
                    size_t take = sizeof(status_line) - status_have;
                    if (take > (size_t)r)
                        take = (size_t)r;
                    memcpy(status_line + status_have, buf, take);
                    status_have += take;
                    if (status_have >= 12 && memcmp(status_line, "HTTP/1.", 7) == 0)
                        rc->ev.status = atoi(status_line + 9);
                }
                if (to_program(rc, buf, (size_t)r))
                    break;
                rc->ev.bytes_down += (uint64_t)r;
                if (rc->ev.bytes_down > rc->s->b->s.max_response_bytes)
                    break;
            } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
                down_open = false;
                rc->s->fd_shut = true; /* from now on a hang-up may be this shutdown's */
                shutdown(fd, SHUT_WR);
            }
        }
    }
    free(buf);
}

/* Headers never forwarded as the client wrote them: hop-by-hop ones (RFC 9110 7.6.1), the
 * proxy's own, and the framing the broker sets itself. */
static bool hop_by_hop(const struct eph_http_header *h)
{
    static const char *const names[] = {"connection",
                                        "keep-alive",
                                        "proxy-connection",
                                        "proxy-authorization",
                                        "proxy-authenticate",
                                        "te",
                                        "trailer",
                                        "upgrade",
                                        "host"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (h->name_len == strlen(names[i]) && strncasecmp(h->name, names[i], h->name_len) == 0)
            return true;
    return false;
}

/* The body's framing, which the broker sets itself after reading the body whole. */
static bool is_framing(const struct eph_http_header *h)
{
    return (h->name_len == 14 && strncasecmp(h->name, "content-length", 14) == 0) ||
           (h->name_len == 17 && strncasecmp(h->name, "transfer-encoding", 17) == 0);
}

static int read_body(struct req_ctx *rc, const struct eph_http_request *req, const char *after,
                     size_t nafter, struct eph_buf *body);

/* A plain-HTTP web request in absolute form: rebuilt from its parts and sent to the checked
 * address; the answer relayed as it comes. */
static void serve_web_http(struct req_ctx *rc, const struct eph_http_request *req,
                           const char *after_head, size_t nafter)
{
    struct eph_http_url u;
    rc->ev.scheme = "http";
    if (eph_http_parse_url(req->target, req->target_len, &u) || u.https) {
        answer_error(rc, 400, "invalid_request_error", "bad_target",
                     "use an absolute http:// URL, or CONNECT for https");
        return;
    }
    size_t pl = u.path_len < sizeof(rc->path) - 1 ? u.path_len : sizeof(rc->path) - 1;
    memcpy(rc->path, u.path, pl);
    rc->path[pl] = '\0';
    struct eph_buf body;
    memset(&body, 0, sizeof(body));
    if (read_body(rc, req, after_head, nafter, &body) || web_connect(rc, &u.auth)) {
        eph_buf_release(&body);
        return;
    }
    struct eph_buf head;
    eph_buf_init(&head, EPH_HTTP_MAX_HEAD + 1024);
    int r = eph_buf_appendf(&head, "%.*s %.*s%s%.*s HTTP/1.1\r\nHost: %s", (int)req->method_len,
                            req->method, (int)u.path_len, u.path, u.query ? "?" : "",
                            (int)u.query_len, u.query ? u.query : "", u.auth.host.name);
    if (!r && u.auth.port != 80)
        r = eph_buf_appendf(&head, ":%u", u.auth.port);
    if (!r)
        r = eph_buf_appends(&head, "\r\n");
    for (size_t i = 0; !r && i < req->nheaders; i++) {
        const struct eph_http_header *h = &req->headers[i];
        if (hop_by_hop(h) || is_framing(h))
            continue;
        r = eph_buf_appendf(&head, "%.*s: %.*s\r\n", (int)h->name_len, h->name, (int)h->value_len,
                            h->value);
    }
    /* The body was read whole (a chunked one de-chunked): it goes with its length. */
    if (!r && (body.len || eph_http_header_find(req, "Content-Length", NULL) ||
               eph_http_header_find(req, "Transfer-Encoding", NULL)))
        r = eph_buf_appendf(&head, "Content-Length: %zu\r\n", body.len);
    if (!r)
        r = eph_buf_appends(&head, "Connection: close\r\n\r\n");
    if (r) {
        eph_buf_release(&head);
        eph_buf_release(&body);
        answer_error(rc, 400, "invalid_request_error", "bad_request", "request head too large");
        return;
    }
    if (write_all(rc->s, rc->s->up, head.data, head.len, rc->deadline_ns) == 0)
        rc->ev.bytes_up += head.len;
    eph_buf_release(&head);
    if (body.len)
        (void)write_all(rc->s, rc->s->up, body.data, body.len,
                        rc->deadline_ns); /* counted when read */
    eph_buf_release(&body);
    rc->ev.status = 502;
    relay(rc, NULL, 0, true, false);
}

static void serve_connect(struct req_ctx *rc, const struct eph_http_request *req,
                          const char *after_head, size_t nafter)
{
    struct eph_http_authority auth;
    rc->ev.scheme = "tunnel";
    if (eph_http_parse_authority(req->target, req->target_len, 0, &auth)) {
        answer_error(rc, 400, "invalid_request_error", "bad_target", "CONNECT needs host:port");
        return;
    }
    rc->path[0] = '\0';
    if (web_connect(rc, &auth))
        return;
    static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
    if (write_all(rc->s, rc->s->fd, ok, sizeof(ok) - 1, rc->deadline_ns))
        return;
    rc->ev.status = 200;
    relay(rc, after_head, nafter, false, true);
}

/* ---- connections ----------------------------------------------------------------------- */

/* A connection's answer goes to the program through answer.h: decoded, trailers dropped,
 * redacted. */
struct curl_out {
    struct req_ctx *rc;
    struct eph_answer ans;
};

static int answer_write(void *arg, const void *data, size_t n)
{
    struct req_ctx *rc = arg;
    rc->ev.bytes_down += n;
    return to_program(rc, data, n);
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
    struct curl_out *o = arg;
    size_t len = size * n;
    int r = eph_answer_header(&o->ans, p, len);
    if (o->ans.status)
        o->rc->ev.status = o->ans.status;
    return r ? 0 : len;
}

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    struct curl_out *o = arg;
    size_t len = size * n;
    return eph_answer_body(&o->ans, p, len) ? 0 : len;
}

static void answer_too_large(struct req_ctx *rc)
{
    answer_error(rc, 413, "invalid_request_error", "request_too_large",
                 "the request body is over the broker's cap");
}

/* Reads a chunked body (what followed the head, then the stream) into body, de-chunked and
 * capped: the upstream gets it with a Content-Length. */
static int read_chunked(struct req_ctx *rc, const char *after, size_t nafter, struct eph_buf *body)
{
    struct eph_http_chunked ch = {0};
    char *tmp = malloc(IO_CHUNK);
    int r = tmp ? 0 : -ENOMEM;
    eph_buf_init(body, (size_t)rc->s->b->s.max_request_bytes);
    while (!r) {
        size_t n;
        if (nafter) {
            n = nafter < IO_CHUNK ? nafter : IO_CHUNK;
            memcpy(tmp, after, n);
            after += n;
            nafter -= n;
        } else {
            ssize_t got = read_some(rc->s, rc->s->fd, tmp, IO_CHUNK, rc->deadline_ns);
            if (got <= 0) {
                r = got ? (int)got : -EPIPE;
                break;
            }
            n = (size_t)got;
        }
        size_t out, used;
        int d = eph_http_chunked_decode(&ch, tmp, n, &out, &used);
        if (d < 0) {
            answer_error(rc, 400, "invalid_request_error", "bad_request", "malformed chunked body");
            r = d;
        } else if ((r = eph_buf_append(body, tmp, out)) == -EMSGSIZE) {
            answer_too_large(rc);
        } else if (!r && d == 1) {
            break;
        }
    }
    free(tmp);
    if (!r) {
        rc->ev.bytes_up += body->len;
        record_request_body(rc, body->data ? body->data : "", body->len);
    }
    return r;
}

/* Reads the request body that follows the head (Content-Length or chunked), capped. */
static int read_body(struct req_ctx *rc, const struct eph_http_request *req, const char *after,
                     size_t nafter, struct eph_buf *body)
{
    enum eph_http_body kind;
    uint64_t want;
    if (eph_http_request_body(req, &kind, &want)) {
        answer_error(rc, 400, "invalid_request_error", "bad_request", "ambiguous body length");
        return -EINVAL;
    }
    if (kind == EPH_HTTP_BODY_CHUNKED)
        return read_chunked(rc, after, nafter, body);
    if (want > rc->s->b->s.max_request_bytes) {
        answer_too_large(rc);
        return -EMSGSIZE;
    }
    eph_buf_init(body, (size_t)want);
    size_t take = nafter < want ? nafter : (size_t)want;
    if (eph_buf_append(body, after, take))
        return -ENOMEM;
    char tmp[IO_CHUNK];
    while (body->len < want) {
        size_t n = want - body->len < sizeof(tmp) ? (size_t)(want - body->len) : sizeof(tmp);
        ssize_t r = read_some(rc->s, rc->s->fd, tmp, n, rc->deadline_ns);
        if (r <= 0)
            return r ? (int)r : -EPIPE;
        if (eph_buf_append(body, tmp, (size_t)r))
            return -ENOMEM;
    }
    rc->ev.bytes_up += body->len;
    record_request_body(rc, body->data ? body->data : "", body->len);
    return 0;
}

static const struct conn_copy *find_conn(struct eph_broker *b, const char *name)
{
    for (size_t i = 0; i < b->nconns; i++)
        if (strcmp(b->conns[i].name, name) == 0)
            return &b->conns[i];
    return NULL;
}

static bool conn_sets_header(const struct conn_copy *c, const struct eph_http_header *h)
{
    for (size_t i = 0; i < c->nheaders; i++)
        if (strlen(c->hnames[i]) == h->name_len &&
            strncasecmp(c->hnames[i], h->name, h->name_len) == 0)
            return true;
    return false;
}

/* curl_easy_perform, watching the stream as every other wait does: the sandbox's reset (or the
 * broker's close) aborts the transfer at once, and curl lets go of its socket, instead of at the
 * request's deadline. */
static CURLcode perform(const struct bstream *s, CURL *h)
{
    CURLM *m = curl_multi_init();
    if (!m || curl_multi_add_handle(m, h) != CURLM_OK) {
        curl_multi_cleanup(m);
        return CURLE_OUT_OF_MEMORY;
    }
    CURLcode cr = CURLE_OK;
    for (;;) {
        int running = 0, left;
        if (curl_multi_perform(m, &running) != CURLM_OK) {
            cr = CURLE_OUT_OF_MEMORY;
            break;
        }
        if (!running) {
            CURLMsg *msg = curl_multi_info_read(m, &left);
            cr = msg && msg->msg == CURLMSG_DONE ? msg->data.result : CURLE_RECV_ERROR;
            break;
        }
        if (stream_gone(s)) {
            cr = CURLE_ABORTED_BY_CALLBACK;
            break;
        }
        /* No event asked on the program's side: poll reports its hang-up all the same. */
        struct curl_waitfd w = {.fd = s->fd};
        if (curl_multi_poll(m, &w, watch_program(s) ? 1 : 0, 1000, NULL) != CURLM_OK) {
            cr = CURLE_RECV_ERROR;
            break;
        }
    }
    curl_multi_remove_handle(m, h);
    curl_multi_cleanup(m);
    return cr;
}

static void serve_connection(struct req_ctx *rc, const struct eph_http_request *req,
                             const char *after_head, size_t nafter)
{
    struct eph_broker *b = rc->s->b;
    static struct eph_conn_target zero;
    EPH_AUTOFREE struct eph_conn_target *t = malloc(sizeof(*t));
    if (!t)
        return;
    *t = zero;
    rc->ev.scheme = "https";
    if (eph_conn_target_parse(req->target, req->target_len, t)) {
        rc->ev.connection = "?";
        answer_error(rc, 403, "permission_error", "path_not_allowed",
                     "the path does not normalise to an allowed form");
        return;
    }
    const struct conn_copy *c = find_conn(b, t->name);
    snprintf(rc->path, sizeof(rc->path), "%s", t->path);
    if (!c) {
        rc->ev.connection = "?";
        snprintf(rc->host, sizeof(rc->host), "%s", t->name);
        answer_error(rc, 403, "permission_error", "unknown_connection",
                     "this run has no connection of that name");
        return;
    }
    rc->ev.connection = c->name;
    bool https = strncmp(c->base_url, "https://", 8) == 0;
    rc->ev.scheme = https ? "https" : "http";
    struct eph_http_url base;
    if (eph_http_parse_url(c->base_url, strlen(c->base_url), &base)) {
        answer_error(rc, 502, "api_error", "bad_connection",
                     "the connection's base URL is invalid");
        return;
    }
    snprintf(rc->host, sizeof(rc->host), "%s", base.auth.host.name);
    rc->ev.port = base.auth.port;
    enum eph_policy_denial d =
        eph_policy_check(req->method, req->method_len, t->path, (const char *const *)c->methods,
                         c->nmethods, (const char *const *)c->prefixes, c->nprefixes);
    if (d != EPH_POLICY_ALLOWED) {
        answer_error(rc, 403, "permission_error", eph_policy_denial_code(d),
                     d == EPH_POLICY_METHOD_NOT_ALLOWED
                         ? "this connection does not allow that method"
                         : "this connection does not allow that path");
        return;
    }
    struct eph_addr a;
    enum eph_addr_class cls;
    struct eph_guard g = guard_of(b, false);
    int r = eph_guard_resolve(&g, &base.auth.host, base.auth.port, &a, &cls);
    if (r) {
        bool no = r == -EACCES || r == -EPERM;
        answer_error(rc, no ? 403 : 502, no ? "permission_error" : "api_error",
                     no ? "address_not_allowed" : "dns_failed",
                     r == -EPERM    ? "the connection's address is the server's own"
                     : r == -EACCES ? "the connection's address is not public"
                                    : "the connection's host does not resolve");
        return;
    }
    struct eph_buf body;
    memset(&body, 0, sizeof(body));
    if (read_body(rc, req, after_head, nafter, &body)) {
        eph_buf_release(&body);
        return;
    }

    /* The URL: the base (its path prefix kept, without a trailing "/"), the normalised path,
     * the client's query, then the connection's own query parameters. */
    struct eph_buf url;
    eph_buf_init(&url, EPH_BROKER_PATH_MAX * 2 + 8192);
    size_t bpl = base.path_len;
    while (bpl > 0 && base.path[bpl - 1] == '/')
        bpl--;
    CURL *h = curl_easy_init();
    int err = h ? 0 : -ENOMEM;
    /* The origin in the spelling the guard checked (pin.h), so curl never resolves it again. */
    if (!err)
        err = eph_pin_origin(&url, base.https, &base.auth);
    if (!err)
        err = eph_buf_appendf(&url, "%.*s%s", (int)bpl, base.path, t->path);
    char sep = '?';
    if (!err && t->query) {
        err = eph_buf_appendf(&url, "?%.*s", (int)t->query_len, t->query);
        sep = '&';
    }
    for (size_t i = 0; !err && i < c->nquery; i++) {
        char *k = curl_easy_escape(h, c->qnames[i], 0), *v = curl_easy_escape(h, c->qvalues[i], 0);
        err = k && v ? eph_buf_appendf(&url, "%c%s=%s", sep, k, v) : -ENOMEM;
        sep = '&';
        curl_free(k);
        if (v) {
            sodium_memzero(v, strlen(v));
            curl_free(v);
        }
    }
    struct curl_slist *hdrs = NULL;
    for (size_t i = 0; !err && i < req->nheaders; i++) {
        const struct eph_http_header *hh = &req->headers[i];
        if (hop_by_hop(hh) || conn_sets_header(c, hh) ||
            (hh->name_len == 15 && strncasecmp(hh->name, "accept-encoding", 15) == 0) ||
            is_framing(hh))
            continue;
        char line[8192];
        snprintf(line, sizeof(line), "%.*s: %.*s", (int)hh->name_len, hh->name, (int)hh->value_len,
                 hh->value);
        hdrs = curl_slist_append(hdrs, line);
    }
    hdrs = curl_slist_append(hdrs, "Accept-Encoding: identity");
    hdrs = curl_slist_append(hdrs, "Expect:");
    for (size_t i = 0; !err && i < c->nheaders; i++) {
        size_t ln = strlen(c->hnames[i]) + strlen(c->hvalues[i]) + 3;
        char *line = malloc(ln);
        if (!line) {
            err = -ENOMEM;
            break;
        }
        snprintf(line, ln, "%s: %s", c->hnames[i], c->hvalues[i]);
        hdrs = curl_slist_append(hdrs, line);
        sodium_memzero(line, ln);
        free(line);
    }

    /* What the upstream may echo, in every form (redact.h): every header value (and the token
     * after its scheme, and a Basic one's user and password) and every query value. */
    struct curl_out o = {.rc = rc};
    eph_answer_init(&o.ans, b->s.max_response_bytes, answer_write, rc);
    for (size_t i = 0; !err && i < c->nheaders; i++)
        err = eph_redactor_add_header_value(&o.ans.red, c->hvalues[i]);
    for (size_t i = 0; !err && i < c->nquery; i++)
        err = eph_redactor_add(&o.ans.red, c->qvalues[i], strlen(c->qvalues[i]));
    if (!err)
        err = eph_redactor_seal(&o.ans.red);

    struct eph_pin pin = {0};
    if (!err)
        err = eph_pin_apply(&pin, h, &base.auth, &a);
    if (!err) {
        char method[32];
        snprintf(method, sizeof(method), "%.*s", (int)req->method_len, req->method);
        curl_easy_setopt(h, CURLOPT_URL, url.data);
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
        curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
        if (b->s.extra_ca_file) {
            curl_easy_setopt(h, CURLOPT_CAINFO, b->s.extra_ca_file);
            curl_easy_setopt(h, CURLOPT_CAPATH, "/etc/ssl/certs");
        }
        curl_easy_setopt(h, CURLOPT_TIMEOUT, (long)b->s.request_timeout_seconds);
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, &o);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &o);
        if (strcmp(method, "HEAD") == 0)
            curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
        if (body.len || strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0 ||
            strcmp(method, "PATCH") == 0) {
            curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.data ? body.data : "");
            curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body.len);
        }
        rc->ev.status = 502;
        CURLcode cr = perform(rc->s, h);
        int ar = cr == CURLE_OK ? eph_answer_end(&o.ans) : 0;
        if (o.ans.refused) {
            /* Nothing of it reached the program: an answer it could have read unredacted. */
            EPH_INFO(COMPONENT, "connection %s: answer refused: %s", c->name, o.ans.refused);
            answer_error(rc, 502, "api_error", o.ans.refused, o.ans.reason);
            rc->ev.denied = o.ans.refused;
        } else if (cr == CURLE_ABORTED_BY_CALLBACK) {
            EPH_DEBUG(COMPONENT, "connection %s: the stream ended first", c->name);
        } else if (ar && !o.ans.head_sent) {
            answer_error(rc, 502, "api_error", "broker_error",
                         "the broker could not relay the answer");
        } else if (cr != CURLE_OK && !o.ans.head_sent) {
            EPH_INFO(COMPONENT, "connection %s: %s", c->name, curl_easy_strerror(cr));
            answer_error(rc, cr == CURLE_OPERATION_TIMEDOUT ? 504 : 502, "api_error",
                         cr == CURLE_OPERATION_TIMEDOUT ? "upstream_timeout" : "upstream_failed",
                         "the connection's upstream did not answer properly");
        }
    } else {
        answer_error(rc, 502, "api_error", "broker_error", "the broker could not send the request");
    }
    eph_answer_release(&o.ans);
    /* The headers hold the credential: wipe before freeing. */
    for (struct curl_slist *l = hdrs; l; l = l->next)
        sodium_memzero(l->data, strlen(l->data));
    curl_slist_free_all(hdrs);
    if (url.data)
        sodium_memzero(url.data, url.len);
    eph_buf_release(&url);
    eph_buf_release(&body);
    if (h)
        curl_easy_cleanup(h);
    eph_pin_release(&pin);
}

/* ---- the record and the replay ------------------------------------------------------------ */

/* The URL of the record, the key a replay matches on: a web request's absolute URI or CONNECT
 * target as sent; a connection's as http://127.0.0.1:3128/<name><normalised path>?<the program's
 * query> (never the query parameters the broker adds). And the program's headers, but the
 * proxy's and the hop-by-hop ones. */
static void record_request(struct req_ctx *rc, const struct eph_http_request *req, bool origin)
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
    free(t);
    if (r)
        eph_buf_release(&rc->url);
    if (!rc->recording || rc->tunnel)
        return;
    rc->req_headers = json_array();
    for (size_t i = 0; rc->req_headers && i < req->nheaders; i++) {
        const struct eph_http_header *h = &req->headers[i];
        if (hop_by_hop(h) || is_framing(h) ||
            (h->name_len >= 6 && strncasecmp(h->name, "proxy-", 6) == 0))
            continue;
        json_t *pair = json_pack("[s%, s%]", h->name, h->name_len, h->value, h->value_len);
        if (pair)
            json_array_append_new(rc->req_headers, pair);
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
static json_t *replay_claim(struct eph_broker *b, const char *method, const char *url,
                            const char *sha)
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
static void replay_describe(struct req_ctx *rc, const struct eph_http_request *req, bool is_connect,
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
        if (t && (*t = zero, eph_conn_target_parse(req->target, req->target_len, t) == 0)) {
            const struct conn_copy *c = find_conn(b, t->name);
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
}

/* Answers from the record, connecting nowhere: the recorded status, headers (with the broker's
 * own framing) and body, or 403 not_recorded. */
static void serve_replay(struct req_ctx *rc, const struct eph_http_request *req,
                         const char *after_head, size_t nafter)
{
    struct eph_broker *b = rc->s->b;
    if (rc->tunnel) {
        answer_error(rc, 403, "permission_error", "not_recorded",
                     "a replay cannot open a tunnel: TLS end to end was not recorded");
        return;
    }
    struct eph_buf body;
    memset(&body, 0, sizeof(body));
    if (read_body(rc, req, after_head, nafter, &body)) {
        eph_buf_release(&body);
        return;
    }
    eph_buf_release(&body);
    json_t *rs = rc->url.data ? replay_claim(b, rc->method, rc->url.data, rc->req_sha) : NULL;
    if (!rs) {
        answer_error(rc, 403, "permission_error", "not_recorded",
                     "this request is not in the recording the run replays");
        return;
    }
    int status = (int)json_integer_value(json_object_get(rs, "status"));
    const char *b64 = json_string_value(json_object_get(rs, "body_base64"));
    size_t blen = b64 ? strlen(b64) : 0, n = 0;
    unsigned char *data = malloc(blen / 4 * 3 + 3);
    if (!data || sodium_base642bin(data, blen / 4 * 3 + 3, b64 ? b64 : "", blen, NULL, &n, NULL,
                                   sodium_base64_VARIANT_ORIGINAL)) {
        free(data);
        answer_error(rc, 502, "api_error", "bad_recording", "the recorded answer is malformed");
        return;
    }
    struct eph_buf head;
    eph_buf_init(&head, EPH_HTTP_MAX_HEAD);
    int r = eph_buf_appendf(&head, "HTTP/1.1 %d %s\r\n", status, reason_phrase(status));
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
    rc->ev.status = status;
    if (!r && to_program(rc, head.data, head.len) == 0) {
        rc->ev.bytes_down += head.len;
        if (to_program(rc, data, n) == 0)
            rc->ev.bytes_down += n;
    }
    eph_buf_release(&head);
    free(data);
}

/* ---- one stream ------------------------------------------------------------------------- */

/* A stream over the run's cap of stream threads: answered 503 at once, from the tunnel's thread
 * (the answer fits a fresh socket pair's buffer), with an event; free, like every denial. */
static void refuse_busy(struct eph_broker *b, int fd)
{
    struct bstream s = {.b = b, .fd = fd, .up = -1};
    struct req_ctx *rc = calloc(1, sizeof(*rc));
    if (!rc)
        return;
    rc->s = &s;
    rc->start_ns = eph_clock_mono_ns();
    rc->deadline_ns = rc->start_ns + 1000000000u;
    rc->ev.connection = b->web ? NULL : "?";
    answer_error(rc, 503, "rate_limit_error", "too_many_tunnels",
                 "too many concurrent connections through the proxy (earlier ones are ending)");
    rc->ev.denied = "too_many_tunnels";
    emit(rc);
    free(rc);
}

static void *serve(void *arg)
{
    struct bstream *s = arg;
    struct eph_broker *b = s->b;
    struct req_ctx *rc = calloc(1, sizeof(*rc));
    char *head = malloc(EPH_HTTP_MAX_HEAD);
    static struct eph_http_request zero_req;
    struct eph_http_request *req = malloc(sizeof(*req));
    if (!rc || !head || !req)
        goto out;
    *req = zero_req;
    rc->s = s;
    rc->start_ns = eph_clock_mono_ns();
    rc->deadline_ns = rc->start_ns + (uint64_t)b->s.request_timeout_seconds * 1000000000u;
    size_t have = 0;
    int r;
    for (;;) {
        r = eph_http_parse_request(head, have, req);
        if (r != -EAGAIN)
            break;
        ssize_t n = read_some(s, s->fd, head + have, EPH_HTTP_MAX_HEAD - have, rc->deadline_ns);
        if (n <= 0)
            goto out; /* the program went away before asking anything */
        have += (size_t)n;
    }
    snprintf(rc->method, sizeof(rc->method), "%.*s",
             (int)(r == 0 && req->method_len < sizeof(rc->method) ? req->method_len : 0),
             r == 0 ? req->method : "");
    if (r) {
        answer_error(rc, 400, "invalid_request_error", "bad_request",
                     r == -EMSGSIZE ? "the request head is too large" : "malformed request");
        emit(rc);
        goto out;
    }
    const char *after = head + req->head_len;
    size_t nafter = have - req->head_len;
    bool is_connect = req->method_len == 7 && memcmp(req->method, "CONNECT", 7) == 0;
    rc->tunnel = is_connect;
    rc->recording = b->record;
    bool absolute = req->target_len > 0 && req->target[0] != '/';
    struct eph_http_url u;
    if (absolute && !is_connect && eph_http_parse_url(req->target, req->target_len, &u) == 0 &&
        !u.https && u.auth.port == EPH_BROKER_PORT && u.path >= req->target &&
        u.path < req->target + req->target_len &&
        (strcmp(u.auth.host.name, "127.0.0.1") == 0 ||
         strcmp(u.auth.host.name, "localhost") == 0)) {
        /* A client that sends everything to its proxy asks the proxy itself for a connection:
         * the same as the origin form. */
        const char *end = u.query ? u.query + u.query_len : u.path + u.path_len;
        req->target_len = (size_t)(end - u.path);
        req->target = u.path;
        absolute = false;
    }
    eph_buf_init(&rc->url, EPH_HTTP_MAX_HEAD);
    eph_buf_init(&rc->req_body, (size_t)b->s.record_body_max_bytes);
    eph_buf_init(&rc->down, b->record ? EPH_HTTP_MAX_HEAD + (size_t)b->s.record_body_max_bytes : 0);
    record_request(rc, req, !absolute && !is_connect);
    if (s->no_budget) {
        rc->ev.connection = absolute || is_connect ? NULL : "?";
        answer_error(rc, 402, "insufficient_balance_error", "budget_exhausted",
                     "the run's budget does not cover this request");
    } else if (b->replay) {
        replay_describe(rc, req, is_connect, absolute);
        serve_replay(rc, req, after, nafter);
    } else if (is_connect || absolute) {
        if (!b->web) {
            answer_error(rc, 403, "permission_error", "web_not_allowed",
                         "this run has no web access");
        } else if (is_connect) {
            serve_connect(rc, req, after, nafter);
        } else {
            serve_web_http(rc, req, after, nafter);
        }
    } else {
        serve_connection(rc, req, after, nafter);
    }
    emit(rc);
out:
    pthread_mutex_lock(&b->lock);
    s->done = true;
    if (s->up >= 0)
        close(s->up);
    s->up = -1;
    close(s->fd);
    s->fd = -1;
    pthread_mutex_unlock(&b->lock);
    if (rc) {
        eph_buf_release(&rc->url);
        eph_buf_release(&rc->req_body);
        eph_buf_release(&rc->down);
        json_decref(rc->req_headers);
    }
    free(req);
    free(head);
    free(rc);
    return NULL;
}

/* ---- web_fetch -------------------------------------------------------------------------- */

#define FETCH_MAX_REDIRECTS 5
#define FETCH_MAX_BODY (2u << 20)

struct fetch_io {
    struct eph_broker *b;
    struct eph_meter *meter;
    struct eph_buf body;
    char ctype[128];
    char location[2048];
    bool cut;
    bool over;
    uint64_t bytes;
    json_t *headers; /* for the record, or NULL */
};

/* The header lines of an answer (not the status line), for the record. */
static void fetch_keep_header(struct fetch_io *io, const char *p, size_t len)
{
    while (len && (p[len - 1] == '\r' || p[len - 1] == '\n'))
        len--;
    if (!io->headers || len == 0 || (len >= 5 && memcmp(p, "HTTP/", 5) == 0))
        return;
    json_t *pair = header_pair(p, len);
    if (pair)
        json_array_append_new(io->headers, pair);
}

/* The record of one web_fetch hop: a GET of url without body, and its answer. */
static json_t *fetch_exchange(struct eph_broker *b, const char *url, int status,
                              struct fetch_io *io)
{
    char empty[65];
    sha256_hex("", 0, empty);
    size_t keep = io->body.len < b->s.record_body_max_bytes ? io->body.len
                                                            : (size_t)b->s.record_body_max_bytes;
    return json_pack("{s:{s:s, s:s, s:[], s:s, s:s}, s:{s:i, s:o, s:o, s:b}}", "request", "method",
                     "GET", "url", url, "headers", "body_base64", "", "body_sha256", empty,
                     "response", "status", status, "headers",
                     io->headers ? json_incref(io->headers) : json_array(), "body_base64",
                     b64_json(io->body.data ? io->body.data : "", keep), "truncated",
                     io->over || io->cut || keep < io->body.len);
}

/* The record of a hop the broker answered itself (refused, failed): its status, nothing else. */
static json_t *fetch_refused(struct eph_broker *b, const char *url, int status)
{
    struct fetch_io none = {.b = b};
    eph_buf_init(&none.body, 0);
    return b->record ? fetch_exchange(b, url, status, &none) : NULL;
}

/* A web_fetch hop answered from the record (replay mode): its status, headers and body, or
 * -EACCES when it is not there. */
static int fetch_replayed(struct eph_broker *b, const char *url, long *status, struct fetch_io *io)
{
    char empty[65];
    sha256_hex("", 0, empty);
    json_t *rs = replay_claim(b, "GET", url, empty);
    if (!rs)
        return -EACCES;
    *status = (long)json_integer_value(json_object_get(rs, "status"));
    size_t i;
    json_t *pair;
    json_array_foreach(json_object_get(rs, "headers"), i, pair)
    {
        const char *k = json_string_value(json_array_get(pair, 0));
        const char *v = json_string_value(json_array_get(pair, 1));
        if (k && v && strcasecmp(k, "content-type") == 0)
            snprintf(io->ctype, sizeof(io->ctype), "%s", v);
        if (k && v && strcasecmp(k, "location") == 0) {
            /* Resolved against the URL, as curl does for a live hop. */
            CURLU *u = curl_url();
            char *abs = NULL;
            if (u && !curl_url_set(u, CURLUPART_URL, url, 0) &&
                !curl_url_set(u, CURLUPART_URL, v, 0) && !curl_url_get(u, CURLUPART_URL, &abs, 0))
                snprintf(io->location, sizeof(io->location), "%s", abs);
            curl_free(abs);
            curl_url_cleanup(u);
        }
    }
    const char *b64 = json_string_value(json_object_get(rs, "body_base64"));
    size_t blen = b64 ? strlen(b64) : 0, n = 0;
    unsigned char *data = malloc(blen / 4 * 3 + 3);
    int r = data && sodium_base642bin(data, blen / 4 * 3 + 3, b64 ? b64 : "", blen, NULL, &n, NULL,
                                      sodium_base64_VARIANT_ORIGINAL) == 0
                ? 0
                : -EINVAL;
    if (!r) {
        size_t k = n < io->body.max ? n : io->body.max;
        io->over = k < n;
        r = eph_buf_append(&io->body, data, k);
        io->bytes = n;
    }
    free(data);
    return r;
}

static size_t fetch_header(char *p, size_t size, size_t n, void *arg)
{
    struct fetch_io *io = arg;
    size_t len = size * n;
    fetch_keep_header(io, p, len);
    if (len > 13 && strncasecmp(p, "content-type:", 13) == 0) {
        size_t s0 = 13;
        while (s0 < len && p[s0] == ' ')
            s0++;
        size_t l = len - s0;
        while (l && (p[s0 + l - 1] == '\r' || p[s0 + l - 1] == '\n' || p[s0 + l - 1] == ' '))
            l--;
        snprintf(io->ctype, sizeof(io->ctype), "%.*s", (int)l, p + s0);
    }
    return len;
}

static size_t fetch_body(char *p, size_t size, size_t n, void *arg)
{
    struct fetch_io *io = arg;
    size_t len = size * n;
    size_t k = len;
    if (io->b->budget) /* the meter is this fetch's own; the budget locks itself */
        k = eph_meter_take(io->meter, io->b->budget, eph_clock_mono_ns(), len);
    io->bytes += k;
    if (k < len) {
        io->cut = true;
        atomic_store(&io->b->exhausted, true);
    }
    size_t room = io->body.max - io->body.len;
    if (k > room) {
        k = room;
        io->over = true;
    }
    if (k && eph_buf_append(&io->body, p, k))
        return 0;
    /* Past the cap or the budget: stop the transfer (what came is kept). */
    return io->cut || io->over ? 0 : len;
}

/* The end of one hop, live or replayed: 1 to follow a redirect (cur is its URL), 0 with out
 * filled, or a negative error with a message in err. Releases io's body. */
static int fetch_finish(struct eph_web_fetch *out, struct fetch_io *io, long status, char *cur,
                        size_t curlen, size_t text_cap, char *err, size_t errlen)
{
    if (status >= 300 && status < 400 && io->location[0]) {
        eph_buf_release(&io->body);
        if (out->redirects + 1 > FETCH_MAX_REDIRECTS) {
            snprintf(err, errlen, "more than %d redirects", FETCH_MAX_REDIRECTS);
            return -ELOOP;
        }
        snprintf(cur, curlen, "%s", io->location);
        out->redirects++;
        return 1;
    }
    out->status = (int)status;
    snprintf(out->content_type, sizeof(out->content_type), "%s", io->ctype);
    const char *data = io->body.data ? io->body.data : "";
    char *text = strncasecmp(io->ctype, "text/html", 9) == 0 ||
                         strncasecmp(io->ctype, "application/xhtml", 17) == 0
                     ? eph_html_to_text(data, io->body.len)
                     : strndup(data, io->body.len);
    eph_buf_release(&io->body);
    if (!text)
        return -ENOMEM;
    out->truncated = io->over;
    if (strlen(text) > text_cap) {
        text[text_cap] = '\0';
        out->truncated = true;
    }
    out->text = text;
    return 0;
}

int eph_broker_web_fetch(struct eph_broker *b, const char *url, size_t text_cap,
                         struct eph_web_fetch *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (!b->web) {
        snprintf(err, errlen, "this run has no web access");
        return -EACCES;
    }
    char cur[2048];
    if (strlen(url) >= sizeof(cur)) {
        snprintf(err, errlen, "the URL is too long");
        return -EINVAL;
    }
    strcpy(cur, url);
    int rc = 0;
    for (;;) {
        struct eph_http_url u;
        if (eph_http_parse_url(cur, strlen(cur), &u)) {
            snprintf(err, errlen, "not an http(s) URL this broker accepts");
            return -EINVAL;
        }
        struct req_ctx rc0 = {0};
        struct bstream fake = {.b = b, .fd = -1, .up = -1};
        rc0.s = &fake;
        rc0.start_ns = eph_clock_mono_ns();
        rc0.ev.scheme = u.https ? "https" : "http";
        rc0.ev.port = u.auth.port;
        snprintf(rc0.method, sizeof(rc0.method), "GET");
        snprintf(rc0.host, sizeof(rc0.host), "%s", u.auth.host.name);
        snprintf(rc0.path, sizeof(rc0.path), "%.*s", (int)u.path_len, u.path);
        eph_meter_init(&fake.meter, b->s.micros_per_request, b->s.micros_per_mib);
        if (b->nweb_allow &&
            !eph_policy_domain_allowed(u.auth.host.name, (const char *const *)b->web_allow,
                                       b->nweb_allow)) {
            rc0.ev.status = 403;
            rc0.ev.denied = "host_not_allowed";
            rc0.ev.exchange = fetch_refused(b, cur, rc0.ev.status);
            emit(&rc0);
            snprintf(err, errlen, "this run may not reach %s", u.auth.host.name);
            return -EACCES;
        }
        struct eph_addr a = {0};
        enum eph_addr_class cls;
        /* A replay resolves nothing either: nothing leaves the machine. */
        struct eph_guard g = guard_of(b, true);
        rc = b->replay ? 0 : eph_guard_resolve(&g, &u.auth.host, u.auth.port, &a, &cls);
        if (rc) {
            bool no = rc == -EACCES || rc == -EPERM;
            rc0.ev.status = no ? 403 : 502;
            rc0.ev.denied = no ? "address_not_allowed" : "dns_failed";
            rc0.ev.exchange = fetch_refused(b, cur, rc0.ev.status);
            emit(&rc0);
            if (rc == -EPERM)
                snprintf(err, errlen, "%s:%u is the server's own address", u.auth.host.name,
                         u.auth.port);
            else if (rc == -EACCES)
                snprintf(err, errlen, "%s is not a public address (%s)", u.auth.host.name,
                         eph_addr_class_name(cls));
            else
                snprintf(err, errlen, "%s does not resolve", u.auth.host.name);
            return rc;
        }
        int fee = b->budget ? eph_meter_start(&fake.meter, b->budget, eph_clock_mono_ns()) : 0;
        if (fee) {
            atomic_store(&b->exhausted, true);
            rc0.ev.status = 402;
            rc0.ev.denied = "budget_exhausted";
            rc0.ev.exchange = fetch_refused(b, cur, rc0.ev.status);
            emit(&rc0);
            snprintf(err, errlen, "the run's budget does not cover this request");
            return -EDQUOT;
        }
        struct fetch_io io = {
            .b = b, .meter = &fake.meter, .headers = b->record ? json_array() : NULL};
        uint64_t cap =
            b->s.max_response_bytes < FETCH_MAX_BODY ? b->s.max_response_bytes : FETCH_MAX_BODY;
        eph_buf_init(&io.body, (size_t)cap);
        if (b->replay) {
            long st = 0;
            int r = fetch_replayed(b, cur, &st, &io);
            rc0.ev.status = r ? 403 : (int)st;
            rc0.ev.denied = r ? "not_recorded" : NULL;
            rc0.ev.bytes_down = io.bytes;
            rc0.ev.exchange = r == 0 && b->record ? fetch_exchange(b, cur, (int)st, &io)
                                                  : fetch_refused(b, cur, rc0.ev.status);
            emit(&rc0);
            json_decref(io.headers);
            if (r) {
                eph_buf_release(&io.body);
                snprintf(err, errlen, "%s is not in the recording this run replays", cur);
                return -EACCES;
            }
            rc = fetch_finish(out, &io, st, cur, sizeof(cur), text_cap, err, errlen);
            if (rc != 1)
                return rc;
            continue;
        }
        /* curl gets the URL in the spelling checked and the address pinned (pin.h); a
         * redirect's Location comes back through this loop, parsed and checked again. */
        struct eph_buf pinned_url;
        eph_buf_init(&pinned_url, sizeof(cur) + 16);
        struct eph_pin pin = {0};
        struct curl_slist *hdrs = curl_slist_append(NULL, "Accept-Encoding: identity");
        CURL *h = curl_easy_init();
        long status = 0;
        char *redirect = NULL;
        CURLcode cr = CURLE_OUT_OF_MEMORY;
        if (h && hdrs && eph_pin_url(&pinned_url, &u) == 0 &&
            eph_pin_apply(&pin, h, &u.auth, &a) == 0) {
            curl_easy_setopt(h, CURLOPT_URL, pinned_url.data);
            curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
            curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
            curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
            curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
            curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
            curl_easy_setopt(h, CURLOPT_USERAGENT, "ephemeral-web-fetch");
            if (b->s.extra_ca_file) {
                curl_easy_setopt(h, CURLOPT_CAINFO, b->s.extra_ca_file);
                curl_easy_setopt(h, CURLOPT_CAPATH, "/etc/ssl/certs");
            }
            curl_easy_setopt(h, CURLOPT_TIMEOUT, (long)b->s.request_timeout_seconds);
            curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
            curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, fetch_header);
            curl_easy_setopt(h, CURLOPT_HEADERDATA, &io);
            curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, fetch_body);
            curl_easy_setopt(h, CURLOPT_WRITEDATA, &io);
            cr = curl_easy_perform(h);
            curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
            if (curl_easy_getinfo(h, CURLINFO_REDIRECT_URL, &redirect) == CURLE_OK && redirect)
                snprintf(io.location, sizeof(io.location), "%s", redirect);
        }
        rc0.ev.status = status ? (int)status : 502;
        rc0.ev.bytes_down = io.bytes;
        rc0.ev.exchange = b->record && status ? fetch_exchange(b, cur, (int)status, &io)
                                              : fetch_refused(b, cur, rc0.ev.status);
        emit(&rc0);
        json_decref(io.headers);
        if (h)
            curl_easy_cleanup(h);
        eph_pin_release(&pin);
        eph_buf_release(&pinned_url);
        curl_slist_free_all(hdrs);
        bool ok_end = cr == CURLE_OK || ((io.over || io.cut) && cr == CURLE_WRITE_ERROR);
        if (!ok_end) {
            eph_buf_release(&io.body);
            snprintf(err, errlen, "the fetch failed: %s", curl_easy_strerror(cr));
            return -EIO;
        }
        if (io.cut) {
            eph_buf_release(&io.body);
            snprintf(err, errlen, "the run's budget ended during the download");
            return -EDQUOT;
        }
        rc = fetch_finish(out, &io, status, cur, sizeof(cur), text_cap, err, errlen);
        if (rc != 1)
            return rc;
    }
}
