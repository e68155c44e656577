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
    bk_answer_error(rc, 503, "rate_limit_error", "too_many_tunnels",
                    "too many concurrent connections through the proxy (earlier ones are ending)");
    rc->ev.denied = "too_many_tunnels";
    bk_emit(rc);
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
        ssize_t n = bk_read_some(s, s->fd, head + have, EPH_HTTP_MAX_HEAD - have, rc->deadline_ns);
        if (n <= 0)
            goto out; /* the program went away before asking anything */
        have += (size_t)n;
    }
    snprintf(rc->method, sizeof(rc->method), "%.*s",
             (int)(r == 0 && req->method_len < sizeof(rc->method) ? req->method_len : 0),
             r == 0 ? req->method : "");
    if (r) {
        bk_answer_error(rc, 400, "invalid_request_error", "bad_request",
                        r == -EMSGSIZE ? "the request head is too large" : "malformed request");
        bk_emit(rc);
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
    bk_record_request(rc, req, !absolute && !is_connect);
    if (s->no_budget) {
        rc->ev.connection = absolute || is_connect ? NULL : "?";
        bk_answer_error(rc, 402, "insufficient_balance_error", "budget_exhausted",
                        "the run's budget does not cover this request");
    } else if (b->replay) {
        if (bk_replay_describe(rc, req, is_connect, absolute))
            bk_answer_error(rc, 502, "api_error", "broker_error",
                            "the broker could not read the request");
        else
            bk_serve_replay(rc, req, after, nafter);
    } else if (is_connect || absolute) {
        if (!b->web) {
            bk_answer_error(rc, 403, "permission_error", "web_not_allowed",
                            "this run has no web access");
        } else if (is_connect) {
            bk_serve_connect(rc, req, after, nafter);
        } else {
            bk_serve_web_http(rc, req, after, nafter);
        }
    } else {
        bk_serve_connection(rc, req, after, nafter);
    }
    bk_emit(rc);
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
