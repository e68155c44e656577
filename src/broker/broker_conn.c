/*
 * broker_conn.c - one run's broker: requests to a connection, its credential added and its
 * answer decoded and redacted on the way back (answer.h). See docs/BROKER.md.
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
    return bk_to_program(rc, data, n);
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
    bk_answer_error(rc, 413, "invalid_request_error", "request_too_large",
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
            ssize_t got = bk_read_some(rc->s, rc->s->fd, tmp, IO_CHUNK, rc->deadline_ns);
            if (got <= 0) {
                r = got ? (int)got : -EPIPE;
                break;
            }
            n = (size_t)got;
        }
        size_t out, used;
        int d = eph_http_chunked_decode(&ch, tmp, n, &out, &used);
        if (d < 0) {
            bk_answer_error(rc, 400, "invalid_request_error", "bad_request",
                            "malformed chunked body");
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
        bk_record_request_body(rc, body->data ? body->data : "", body->len);
    }
    return r;
}

/* Reads the request body that follows the head (Content-Length or chunked), capped. */
int bk_read_body(struct req_ctx *rc, const struct eph_http_request *req, const char *after,
                 size_t nafter, struct eph_buf *body)
{
    enum eph_http_body kind;
    uint64_t want;
    if (eph_http_request_body(req, &kind, &want)) {
        bk_answer_error(rc, 400, "invalid_request_error", "bad_request", "ambiguous body length");
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
        ssize_t r = bk_read_some(rc->s, rc->s->fd, tmp, n, rc->deadline_ns);
        if (r <= 0)
            return r ? (int)r : -EPIPE;
        if (eph_buf_append(body, tmp, (size_t)r))
            return -ENOMEM;
    }
    rc->ev.bytes_up += body->len;
    bk_record_request_body(rc, body->data ? body->data : "", body->len);
    return 0;
}

const struct conn_copy *bk_find_conn(struct eph_broker *b, const char *name)
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
        if (bk_stream_gone(s)) {
            cr = CURLE_ABORTED_BY_CALLBACK;
            break;
        }
        /* No event asked on the program's side: poll reports its hang-up all the same. */
        struct curl_waitfd w = {.fd = s->fd};
        if (curl_multi_poll(m, &w, bk_watch_program(s) ? 1 : 0, 1000, NULL) != CURLM_OK) {
            cr = CURLE_RECV_ERROR;
            break;
        }
    }
    curl_multi_remove_handle(m, h);
    curl_multi_cleanup(m);
    return cr;
}

/* The request's connection, its policy and its address, each checked: NULL after answering the
 * program with why not. */
static const struct conn_copy *conn_check(struct req_ctx *rc, const struct eph_http_request *req,
                                          const struct eph_conn_target *t,
                                          struct eph_http_url *base, struct eph_addr *a)
{
    struct eph_broker *b = rc->s->b;
    const struct conn_copy *c = bk_find_conn(b, t->name);
    snprintf(rc->path, sizeof(rc->path), "%s", t->path);
    if (!c) {
        rc->ev.connection = "?";
        snprintf(rc->host, sizeof(rc->host), "%s", t->name);
        bk_answer_error(rc, 403, "permission_error", "unknown_connection",
                        "this run has no connection of that name");
        return NULL;
    }
    rc->ev.connection = c->name;
    bool https = strncmp(c->base_url, "https://", 8) == 0;
    rc->ev.scheme = https ? "https" : "http";
    if (eph_http_parse_url(c->base_url, strlen(c->base_url), base)) {
        bk_answer_error(rc, 502, "api_error", "bad_connection",
                        "the connection's base URL is invalid");
        return NULL;
    }
    snprintf(rc->host, sizeof(rc->host), "%s", base->auth.host.name);
    rc->ev.port = base->auth.port;
    enum eph_policy_denial d =
        eph_policy_check(req->method, req->method_len, t->path, (const char *const *)c->methods,
                         c->nmethods, (const char *const *)c->prefixes, c->nprefixes);
    if (d != EPH_POLICY_ALLOWED) {
        bk_answer_error(rc, 403, "permission_error", eph_policy_denial_code(d),
                        d == EPH_POLICY_METHOD_NOT_ALLOWED
                            ? "this connection does not allow that method"
                            : "this connection does not allow that path");
        return NULL;
    }
    enum eph_addr_class cls;
    struct eph_guard g = bk_guard_of(b, false);
    int r = eph_guard_resolve(&g, &base->auth.host, base->auth.port, a, &cls);
    if (r) {
        bool no = r == -EACCES || r == -EPERM;
        bk_answer_error(rc, no ? 403 : 502, no ? "permission_error" : "api_error",
                        no ? "address_not_allowed" : "dns_failed",
                        r == -EPERM    ? "the connection's address is the server's own"
                        : r == -EACCES ? "the connection's address is not public"
                                       : "the connection's host does not resolve");
        return NULL;
    }
    return c;
}

/* The URL: the origin in the spelling the guard checked (pin.h, so curl never resolves it again),
 * the base's path prefix without a trailing "/", the normalised path, the client's query, then
 * the connection's own query parameters. */
static int conn_url(CURL *h, struct eph_buf *url, const struct eph_http_url *base,
                    const struct eph_conn_target *t, const struct conn_copy *c)
{
    size_t bpl = base->path_len;
    while (bpl > 0 && base->path[bpl - 1] == '/')
        bpl--;
    int err = eph_pin_origin(url, base->https, &base->auth);
    if (!err)
        err = eph_buf_appendf(url, "%.*s%s", (int)bpl, base->path, t->path);
    char sep = '?';
    if (!err && t->query) {
        err = eph_buf_appendf(url, "?%.*s", (int)t->query_len, t->query);
        sep = '&';
    }
    for (size_t i = 0; !err && i < c->nquery; i++) {
        char *k = curl_easy_escape(h, c->qnames[i], 0), *v = curl_easy_escape(h, c->qvalues[i], 0);
        err = k && v ? eph_buf_appendf(url, "%c%s=%s", sep, k, v) : -ENOMEM;
        sep = '&';
        curl_free(k);
        if (v) {
            sodium_memzero(v, strlen(v));
            curl_free(v);
        }
    }
    return err;
}

/* Appends a header line to *l: -ENOMEM, with *l as it was, when curl cannot (its own failure
 * returns NULL and would lose the list, and with it Accept-Encoding: identity or a credential). */
static int header_add(struct curl_slist **l, const char *line)
{
    struct curl_slist *n = curl_slist_append(*l, line);
    if (!n)
        return -ENOMEM;
    *l = n;
    return 0;
}

/* The headers sent: the program's (but hop-by-hop, framing, Accept-Encoding and those the
 * connection sets), then the connection's credential headers. All of them or an error: *out
 * holds what was made either way, for the caller to free. */
static int conn_headers(const struct eph_http_request *req, const struct conn_copy *c,
                        struct curl_slist **out)
{
    int err = 0;
    for (size_t i = 0; !err && i < req->nheaders; i++) {
        const struct eph_http_header *hh = &req->headers[i];
        if (bk_hop_by_hop(hh) || conn_sets_header(c, hh) ||
            (hh->name_len == 15 && strncasecmp(hh->name, "accept-encoding", 15) == 0) ||
            bk_is_framing(hh))
            continue;
        char line[8192];
        snprintf(line, sizeof(line), "%.*s: %.*s", (int)hh->name_len, hh->name, (int)hh->value_len,
                 hh->value);
        err = header_add(out, line);
    }
    if (!err)
        err = header_add(out, "Accept-Encoding: identity");
    if (!err)
        err = header_add(out, "Expect:");
    for (size_t i = 0; !err && i < c->nheaders; i++) {
        size_t ln = strlen(c->hnames[i]) + strlen(c->hvalues[i]) + 3;
        char *line = malloc(ln);
        if (!line)
            return -ENOMEM;
        snprintf(line, ln, "%s: %s", c->hnames[i], c->hvalues[i]);
        err = header_add(out, line);
        sodium_memzero(line, ln);
        free(line);
    }
    return err;
}

/* What the upstream may echo, in every form (redact.h): every header value (and the token after
 * its scheme, and a Basic one's user and password) and every query value. */
static int conn_redactor(struct eph_redactor *red, const struct conn_copy *c)
{
    int err = 0;
    for (size_t i = 0; !err && i < c->nheaders; i++)
        err = eph_redactor_add_header_value(red, c->hvalues[i]);
    for (size_t i = 0; !err && i < c->nquery; i++)
        err = eph_redactor_add(red, c->qvalues[i], strlen(c->qvalues[i]));
    return err ? err : eph_redactor_seal(red);
}

/* The request made, and what went wrong answered to the program when nothing of the answer has
 * reached it yet. */
static void conn_perform(struct req_ctx *rc, const struct eph_http_request *req, CURL *h,
                         const struct conn_copy *c, const char *url, struct curl_slist *hdrs,
                         const struct eph_buf *body, struct curl_out *o)
{
    struct eph_broker *b = rc->s->b;
    char method[32];
    snprintf(method, sizeof(method), "%.*s", (int)req->method_len, req->method);
    curl_easy_setopt(h, CURLOPT_URL, url);
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
    curl_easy_setopt(h, CURLOPT_HEADERDATA, o);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, o);
    if (strcmp(method, "HEAD") == 0)
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    if (body->len || strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0 ||
        strcmp(method, "PATCH") == 0) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body->data ? body->data : "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body->len);
    }
    rc->ev.status = 502;
    CURLcode cr = perform(rc->s, h);
    int ar = cr == CURLE_OK ? eph_answer_end(&o->ans) : 0;
    if (o->ans.refused) {
        /* Nothing of it reached the program: an answer it could have read unredacted. */
        EPH_INFO(COMPONENT, "connection %s: answer refused: %s", c->name, o->ans.refused);
        bk_answer_error(rc, 502, "api_error", o->ans.refused, o->ans.reason);
        rc->ev.denied = o->ans.refused;
    } else if (cr == CURLE_ABORTED_BY_CALLBACK) {
        EPH_DEBUG(COMPONENT, "connection %s: the stream ended first", c->name);
    } else if (ar && !o->ans.head_sent) {
        bk_answer_error(rc, 502, "api_error", "broker_error",
                        "the broker could not relay the answer");
    } else if (cr != CURLE_OK && !o->ans.head_sent) {
        EPH_INFO(COMPONENT, "connection %s: %s", c->name, curl_easy_strerror(cr));
        bk_answer_error(rc, cr == CURLE_OPERATION_TIMEDOUT ? 504 : 502, "api_error",
                        cr == CURLE_OPERATION_TIMEDOUT ? "upstream_timeout" : "upstream_failed",
                        "the connection's upstream did not answer properly");
    }
}

void bk_serve_connection(struct req_ctx *rc, const struct eph_http_request *req,
                         const char *after_head, size_t nafter)
{
    struct eph_broker *b = rc->s->b;
    static struct eph_conn_target zero;
    EPH_AUTOFREE struct eph_conn_target *t = malloc(sizeof(*t));
    if (!t) {
        rc->ev.connection = "?";
        bk_answer_error(rc, 502, "api_error", "broker_error",
                        "the broker could not read the request");
        return;
    }
    *t = zero;
    rc->ev.scheme = "https";
    if (eph_conn_target_parse(req->target, req->target_len, t)) {
        rc->ev.connection = "?";
        bk_answer_error(rc, 403, "permission_error", "path_not_allowed",
                        "the path does not normalise to an allowed form");
        return;
    }
    struct eph_http_url base;
    struct eph_addr a;
    const struct conn_copy *c = conn_check(rc, req, t, &base, &a);
    if (!c)
        return;
    struct eph_buf body;
    memset(&body, 0, sizeof(body));
    if (bk_read_body(rc, req, after_head, nafter, &body)) {
        eph_buf_release(&body);
        return;
    }
    struct eph_buf url;
    eph_buf_init(&url, EPH_BROKER_PATH_MAX * 2 + 8192);
    CURL *h = curl_easy_init();
    int err = h ? conn_url(h, &url, &base, t, c) : -ENOMEM;
    struct curl_slist *hdrs = NULL;
    if (!err)
        err = conn_headers(req, c, &hdrs);
    struct curl_out o = {.rc = rc};
    eph_answer_init(&o.ans, b->s.max_response_bytes, answer_write, rc);
    if (!err)
        err = conn_redactor(&o.ans.red, c);
    struct eph_pin pin = {0};
    if (!err)
        err = eph_pin_apply(&pin, h, &base.auth, &a);
    if (!err)
        conn_perform(rc, req, h, c, url.data, hdrs, &body, &o);
    else
        bk_answer_error(rc, 502, "api_error", "broker_error",
                        "the broker could not send the request");
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
