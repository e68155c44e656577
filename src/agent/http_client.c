/*
 * http_client.c - POST with caps, deadline, cancellation, retries; and the SSE line parser.
 *
 * The transfer runs on a curl multi handle polled in slices of at most POLL_SLICE_MS, so a cancel
 * flag or a deadline is noticed within that slice even when the server sends nothing (an xferinfo
 * callback alone is called only about once a second on an idle connection).
 */
#include "agent/http_client.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>
#include <jansson.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/id.h"
#include "common/log.h"

#define POLL_SLICE_MS 20
#define DEFAULT_ATTEMPTS 4
#define BACKOFF_BASE_MS 500
#define BACKOFF_MAX_MS 8000
#define RETRY_AFTER_MAX_MS 3600000u /* parsing only: the caller decides whether to wait */
#define CONNECT_TIMEOUT_MS 30000
#define ERROR_MESSAGE_MAX (EPH_HTTP_ERROR_MAX - 1)
/* After a complete streamed answer, how long the end of the stream is awaited (so that the
 * connection stays reusable), and how many bytes of it are taken: a server that holds the
 * connection open or keeps sending costs that, then the connection is dropped. */
#define STOP_GRACE_MS 50
#define STOP_TAIL_MAX 4096

/* ---- global init ---- */

static pthread_once_t http_once = PTHREAD_ONCE_INIT;
static int http_init_rc;

static void http_global_init_once(void)
{
    http_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -EIO;
}

int eph_http_global_init(void)
{
    pthread_once(&http_once, http_global_init_once);
    return http_init_rc;
}

/* ---- SSE ---- */

void eph_sse_init(struct eph_sse *s, size_t line_max, eph_sse_event_fn on_event, void *ctx)
{
    memset(s, 0, sizeof(*s));
    eph_buf_init(&s->line, line_max);
    eph_buf_init(&s->data, line_max);
    s->on_event = on_event;
    s->ctx = ctx;
}

void eph_sse_release(struct eph_sse *s)
{
    eph_buf_release(&s->line);
    eph_buf_release(&s->data);
}

static int sse_dispatch(struct eph_sse *s)
{
    int rc = 0;
    if (s->have_data)
        rc = s->on_event(s->ctx, s->event, s->data.data ? s->data.data : "", s->data.len);
    eph_buf_reset(&s->data);
    s->have_data = false;
    s->event[0] = '\0';
    return rc;
}

/* One complete line, without its line end. */
static int sse_line(struct eph_sse *s, const char *line, size_t n)
{
    if (n == 0)
        return sse_dispatch(s);
    if (line[0] == ':')
        return 0; /* comment, e.g. a keep-alive */
    const char *colon = memchr(line, ':', n);
    size_t flen = colon ? (size_t)(colon - line) : n;
    const char *val = colon ? colon + 1 : line + n;
    size_t vlen = colon ? n - flen - 1 : 0;
    if (vlen && val[0] == ' ') {
        val++;
        vlen--;
    }
    if (flen == 4 && memcmp(line, "data", 4) == 0) {
        int rc = 0;
        if (s->have_data)
            rc = eph_buf_append(&s->data, "\n", 1);
        if (!rc)
            rc = eph_buf_append(&s->data, val, vlen);
        if (rc)
            return rc;
        s->have_data = true;
    } else if (flen == 5 && memcmp(line, "event", 5) == 0) {
        size_t k = vlen < sizeof(s->event) - 1 ? vlen : sizeof(s->event) - 1;
        memcpy(s->event, val, k);
        s->event[k] = '\0';
    }
    /* "id" and "retry" mean nothing to a single POST answer; unknown fields are ignored. */
    return 0;
}

int eph_sse_feed(struct eph_sse *s, const char *p, size_t n)
{
    if (n == 0)
        return 0; /* an empty chunk changes nothing, not even a pending CR */
    size_t i = 0;
    if (s->last_cr && n && p[0] == '\n')
        i = 1;
    s->last_cr = false;
    while (i < n) {
        size_t start = i;
        while (i < n && p[i] != '\n' && p[i] != '\r')
            i++;
        if (i > start) {
            int rc = eph_buf_append(&s->line, p + start, i - start);
            if (rc)
                return rc;
        }
        if (i == n)
            break; /* the line continues in the next chunk */
        if (p[i] == '\r') {
            if (i + 1 < n && p[i + 1] == '\n')
                i++;
            else if (i + 1 == n)
                s->last_cr = true;
        }
        i++;
        int rc = sse_line(s, s->line.data ? s->line.data : "", s->line.len);
        eph_buf_reset(&s->line);
        if (rc)
            return rc;
    }
    return 0;
}

int eph_sse_finish(struct eph_sse *s)
{
    if (s->line.len) {
        int rc = sse_line(s, s->line.data, s->line.len);
        eph_buf_reset(&s->line);
        if (rc)
            return rc;
    }
    return sse_dispatch(s);
}

int eph_sse_parse(const char *p, size_t n, size_t line_max, eph_sse_event_fn on_event, void *ctx)
{
    struct eph_sse s;
    eph_sse_init(&s, line_max, on_event, ctx);
    int rc = eph_sse_feed(&s, p, n);
    if (!rc)
        rc = eph_sse_finish(&s);
    eph_sse_release(&s);
    return rc;
}

bool eph_sse_sniff(const char *p, size_t n)
{
    while (n && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) {
        p++;
        n--;
    }
    return (n >= 5 && memcmp(p, "data:", 5) == 0) || (n >= 6 && memcmp(p, "event:", 6) == 0) ||
           (n >= 1 && *p == ':');
}

/* ---- helpers ---- */

char *eph_http_join_url(const char *base, const char *path)
{
    size_t blen = strlen(base);
    while (blen && base[blen - 1] == '/')
        blen--;
    while (*path == '/')
        path++;
    size_t plen = strlen(path);
    char *out = malloc(blen + 1 + plen + 1);
    if (!out)
        return NULL;
    memcpy(out, base, blen);
    out[blen] = '/';
    memcpy(out + blen + 1, path, plen + 1);
    return out;
}

/* Copies s into out (the message sink), dropping control characters and the secret. */
static void sanitise(const char *s, size_t n, const char *secret, char *out, size_t outlen)
{
    size_t slen = secret ? strlen(secret) : 0;
    size_t cap = outlen - 1 < ERROR_MESSAGE_MAX ? outlen - 1 : ERROR_MESSAGE_MAX;
    size_t o = 0;
    bool space = true; /* collapses runs of whitespace and drops leading ones */
    for (size_t i = 0; i < n && o < cap;) {
        /* The key, or a long piece of its start (an echo the server cut short), is redacted. */
        size_t match = 0;
        while (match < slen && i + match < n && s[i + match] == secret[match])
            match++;
        if (slen >= 4 && (match == slen || match >= 12)) {
            static const char red[] = "[redacted]";
            if (o + sizeof(red) - 1 > cap)
                break;
            memcpy(out + o, red, sizeof(red) - 1);
            o += sizeof(red) - 1;
            i += match;
            space = false;
            continue;
        }
        unsigned char c = (unsigned char)s[i++];
        if (c < 0x20 || c == 0x7f) {
            if (!space)
                out[o++] = ' ';
            space = true;
            continue;
        }
        space = c == ' ';
        if (space && (o == 0 || out[o - 1] == ' '))
            continue;
        out[o++] = (char)c;
    }
    /* Do not end in the middle of a UTF-8 sequence: back up to the last lead byte and check that
     * its sequence is complete. */
    if (o) {
        size_t k = o;
        while (k > 0 && ((unsigned char)out[k - 1] & 0xc0) == 0x80)
            k--;
        if (k > 0 && ((unsigned char)out[k - 1] & 0x80)) {
            unsigned char lead = (unsigned char)out[k - 1];
            size_t want = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
            if (o - (k - 1) < want)
                o = k - 1;
        }
    }
    while (o && out[o - 1] == ' ')
        o--;
    out[o] = '\0';
}

void eph_http_error_message(const char *body, size_t len, const char *secret, char *out,
                            size_t outlen)
{
    if (!outlen)
        return;
    out[0] = '\0';
    if (!body || !len)
        return;
    json_error_t jerr;
    json_t *root = json_loadb(body, len, 0, &jerr);
    const char *msg = NULL;
    if (json_is_object(root)) {
        json_t *e = json_object_get(root, "error");
        if (json_is_object(e))
            msg = json_string_value(json_object_get(e, "message"));
        else if (json_is_string(e))
            msg = json_string_value(e);
        if (!msg)
            msg = json_string_value(json_object_get(root, "message"));
        const json_t *detail = json_object_get(root, "detail");
        if (!msg)
            msg = json_string_value(detail);
        /* FastAPI/pydantic validation errors (vLLM): detail[0].msg, never detail[0].input,
         * which echoes the request */
        if (!msg)
            msg = json_string_value(json_object_get(json_array_get(detail, 0), "msg"));
    }
    if (msg)
        sanitise(msg, strlen(msg), secret, out, outlen);
    else if (!root)
        sanitise(body, len, secret, out, outlen); /* a proxy's text or HTML error page */
    /* JSON without a message field: nothing, rather than fields that may quote the prompt */
    json_decref(root);
}

/* ---- one attempt ---- */

/* ---- connections kept for reuse ---- */

/* A multi handle (which owns the connection cache) with the one easy handle that runs on it (which
 * owns the TLS session cache): reused together, the next attempt finds its connection open. */
struct http_conn {
    CURLM *multi;
    CURL *easy;
    struct http_conn *next;
};

struct eph_http_pool {
    pthread_mutex_t lock;
    struct http_conn *idle;
    unsigned nidle, max_idle;
};

static void conn_free(struct http_conn *c)
{
    if (!c)
        return;
    if (c->easy)
        curl_easy_cleanup(c->easy);
    if (c->multi)
        curl_multi_cleanup(c->multi);
    free(c);
}

static struct http_conn *conn_new(void)
{
    struct http_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->multi = curl_multi_init();
    c->easy = curl_easy_init();
    if (!c->multi || !c->easy) {
        conn_free(c);
        return NULL;
    }
    return c;
}

struct eph_http_pool *eph_http_pool_new(unsigned max_idle)
{
    struct eph_http_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    pthread_mutex_init(&p->lock, NULL);
    p->max_idle = max_idle;
    return p;
}

void eph_http_pool_free(struct eph_http_pool *p)
{
    if (!p)
        return;
    while (p->idle) {
        struct http_conn *c = p->idle;
        p->idle = c->next;
        conn_free(c);
    }
    pthread_mutex_destroy(&p->lock);
    free(p);
}

/* An idle connection of the pool (the most recently used: the likeliest to be still open), with
 * its options back at their defaults, or a new one. NULL on -ENOMEM. */
static struct http_conn *conn_borrow(struct eph_http_pool *p)
{
    struct http_conn *c = NULL;
    if (p) {
        pthread_mutex_lock(&p->lock);
        c = p->idle;
        if (c) {
            p->idle = c->next;
            p->nidle--;
        }
        pthread_mutex_unlock(&p->lock);
    }
    if (!c)
        return conn_new();
    c->next = NULL;
    curl_easy_reset(c->easy); /* keeps the open connections and the TLS sessions */
    return c;
}

/* Gives c back to the pool when it has room, else closes it. */
static void conn_return(struct eph_http_pool *p, struct http_conn *c)
{
    if (!c)
        return;
    /* The options point at the finished attempt's buffers: none may outlive it. */
    curl_easy_setopt(c->easy, CURLOPT_ERRORBUFFER, NULL);
    curl_easy_setopt(c->easy, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(c->easy, CURLOPT_POSTFIELDS, NULL);
    if (p) {
        pthread_mutex_lock(&p->lock);
        if (p->nidle < p->max_idle) {
            c->next = p->idle;
            p->idle = c;
            p->nidle++;
            c = NULL;
        }
        pthread_mutex_unlock(&p->lock);
    }
    conn_free(c);
}

struct attempt {
    const struct eph_http_request *req;
    CURL *easy;
    struct eph_http_response *resp;
    struct eph_sse sse;
    bool decided; /* the body's destination (SSE or buffer) is chosen at its first byte */
    bool stopped; /* on_event said the answer is complete */
    uint64_t stopped_ns;
    size_t tail; /* bytes after the complete answer, discarded */
    size_t received;
    uint64_t last_byte_ns; /* the last sign of life: a byte in, or upload progress */
    curl_off_t last_ul;
    int rc; /* why a callback aborted the transfer */
    char why[160];
};

static bool cancelled(const struct eph_http_request *req)
{
    return req->cancel && atomic_load(req->cancel);
}

static bool past_deadline(const struct eph_http_request *req)
{
    return req->deadline_ns && eph_clock_mono_ns() >= req->deadline_ns;
}

static size_t on_write(char *p, size_t size, size_t nmemb, void *userdata)
{
    struct attempt *a = userdata;
    size_t n = size * nmemb;
    if (a->rc)
        return 0;
    if (a->stopped) {
        /* Past the complete answer: the stream's end is let through and thrown away. */
        if (n > STOP_TAIL_MAX - a->tail)
            return 0;
        a->tail += n;
        return n;
    }
    a->last_byte_ns = eph_clock_mono_ns();
    if (n > a->req->max_body || a->received > a->req->max_body - n) {
        a->rc = -EMSGSIZE;
        snprintf(a->why, sizeof(a->why), "response too large (over %zu bytes)", a->req->max_body);
        return 0;
    }
    a->received += n;
    if (!a->decided) {
        long status = 0;
        char *ctype = NULL;
        curl_easy_getinfo(a->easy, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_getinfo(a->easy, CURLINFO_CONTENT_TYPE, &ctype);
        a->resp->status = status;
        a->resp->streamed = a->req->on_event && status >= 200 && status < 300 && ctype &&
                            strncasecmp(ctype, "text/event-stream", 17) == 0;
        a->decided = true;
    }
    int rc;
    if (a->resp->streamed) {
        rc = eph_sse_feed(&a->sse, p, n);
        if (rc == -EMSGSIZE)
            snprintf(a->why, sizeof(a->why), "response too large (event line over %zu bytes)",
                     a->req->sse_line_max);
    } else {
        rc = eph_buf_append(&a->resp->body, p, n);
    }
    if (rc == EPH_SSE_STOP) {
        /* The answer is complete: what may follow (the stream's end, or a server holding the
         * connection open) is awaited for STOP_GRACE_MS at most. */
        a->stopped = true;
        a->stopped_ns = eph_clock_mono_ns();
        return n;
    }
    if (rc) {
        a->rc = rc;
        return 0;
    }
    return n;
}

/* Parses Retry-After (seconds or an HTTP date) and OpenAI's retry-after-ms. */
static size_t on_header(char *p, size_t size, size_t nmemb, void *userdata)
{
    struct attempt *a = userdata;
    size_t n = size * nmemb;
    char line[256];
    a->last_byte_ns = eph_clock_mono_ns();
    if (n >= 5 && memcmp(p, "HTTP/", 5) == 0) {
        a->resp->retry_after_ms = 0; /* a new answer (after a 100 Continue, say) */
        return n;
    }
    if (n >= sizeof(line))
        return n;
    memcpy(line, p, n);
    line[n] = '\0';
    char *colon = strchr(line, ':');
    if (!colon)
        return n;
    *colon = '\0';
    char *val = colon + 1;
    while (*val == ' ' || *val == '\t')
        val++;
    val[strcspn(val, "\r\n")] = '\0';
    if (strcasecmp(line, "retry-after-ms") == 0) {
        char *end;
        unsigned long long ms = strtoull(val, &end, 10);
        if (end != val && *val != '-')
            a->resp->retry_after_ms = ms > RETRY_AFTER_MAX_MS ? RETRY_AFTER_MAX_MS : ms;
    } else if (strcasecmp(line, "retry-after") == 0 && a->resp->retry_after_ms == 0) {
        char *end;
        unsigned long long secs = strtoull(val, &end, 10);
        if (end != val && *end == '\0' && *val != '-') {
            a->resp->retry_after_ms =
                secs > RETRY_AFTER_MAX_MS / 1000 ? RETRY_AFTER_MAX_MS : secs * 1000;
        } else {
            time_t when = curl_getdate(val, NULL);
            time_t now = time(NULL);
            if (when != -1 && when > now) {
                unsigned long long d = (unsigned long long)(when - now);
                a->resp->retry_after_ms =
                    d > RETRY_AFTER_MAX_MS / 1000 ? RETRY_AFTER_MAX_MS : d * 1000;
            }
        }
    }
    return n;
}

static bool stop_grace_over(const struct attempt *a)
{
    return a->stopped && eph_clock_mono_ns() - a->stopped_ns >= STOP_GRACE_MS * 1000000ull;
}

/* Called by libcurl during long operations inside curl_multi_perform (TLS handshakes, big
 * writes); the poll loop below covers idle waits. */
static int on_xferinfo(void *userdata, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    struct attempt *a = userdata;
    if (ulnow != a->last_ul) {
        a->last_ul = ulnow;
        a->last_byte_ns = eph_clock_mono_ns();
    }
    return cancelled(a->req) || past_deadline(a->req) || stop_grace_over(a);
}

static bool idle_too_long(const struct attempt *a)
{
    return a->req->idle_timeout_ms &&
           eph_clock_mono_ns() - a->last_byte_ns >= (uint64_t)a->req->idle_timeout_ms * 1000000u;
}

static bool curl_transient(CURLcode c)
{
    switch (c) {
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
    case CURLE_NOT_BUILT_IN:
    case CURLE_OUT_OF_MEMORY:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_BAD_FUNCTION_ARGUMENT:
    case CURLE_TOO_MANY_REDIRECTS:
    case CURLE_LOGIN_DENIED:
        return false;
    default:
        return true;
    }
}

static uint64_t remaining_ms(const struct eph_http_request *req)
{
    if (!req->deadline_ns)
        return UINT64_MAX;
    uint64_t now = eph_clock_mono_ns();
    return now >= req->deadline_ns ? 0 : (req->deadline_ns - now) / 1000000u;
}

/* One attempt. 0 when an answer came back (resp->status says which); a negative errno otherwise,
 * with *transient telling whether another attempt may succeed. */
/* The attempt's options on its handle: the request, the callbacks into a, and the timeouts
 * (limit: the deadline, plus a second, as libcurl's backstop; UINT64_MAX: none). */
static void attempt_options(const struct eph_http_request *req, struct curl_slist *headers,
                            struct attempt *a, char *curl_err, uint64_t limit)
{
    CURL *e = a->easy;
    curl_easy_setopt(e, CURLOPT_URL, req->url);
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, req->body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, a);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, a);
    curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_xferinfo);
    curl_easy_setopt(e, CURLOPT_XFERINFODATA, a);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, curl_err);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);       /* threads: no SIGALRM for DNS timeouts */
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L); /* a POST is never redirected silently */
    curl_easy_setopt(e, CURLOPT_USERAGENT, "ephemeral/1");
    curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, ""); /* gzip etc.; the cap counts decoded bytes */
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                     (long)(limit < CONNECT_TIMEOUT_MS ? limit : CONNECT_TIMEOUT_MS));
    if (limit != UINT64_MAX)
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(limit > LONG_MAX ? LONG_MAX : limit));
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(e, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
}

/* What a finished (or stopped) attempt comes to: 0, or the error with err said and *transient
 * set when another attempt may succeed. */
static int attempt_result(const struct eph_http_request *req, struct attempt *a, CURLcode result,
                          const char *curl_err, bool *transient, char *err, size_t errlen)
{
    struct eph_http_response *resp = a->resp;
    CURL *e = a->easy;
    int rc = 0;
    if (a->stopped) {
        long status = 0;
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
        resp->status = status;
        resp->stopped = true;
    } else if (a->rc) {
        rc = a->rc;
        if (a->why[0])
            snprintf(err, errlen, "%s: %s", req->what, a->why);
        else if (req->event_error && req->event_error[0])
            snprintf(err, errlen, "%s", req->event_error);
        else
            snprintf(err, errlen, "%s: %s", req->what, eph_strerror(rc));
        /* -EAGAIN from on_event: the stream carried a transient error (an overloaded event in
         * the middle of a 200 answer); another attempt may succeed. */
        if (rc == -EAGAIN) {
            rc = -EIO;
            *transient = true;
        }
    } else if (result == CURLE_ABORTED_BY_CALLBACK && cancelled(req)) {
        rc = -ECANCELED;
        snprintf(err, errlen, "%s: call cancelled", req->what);
    } else if ((result == CURLE_ABORTED_BY_CALLBACK || result == CURLE_OPERATION_TIMEDOUT) &&
               past_deadline(req)) {
        rc = -ETIMEDOUT;
        snprintf(err, errlen, "%s: deadline passed during the call", req->what);
    } else if (result != CURLE_OK) {
        rc = -EIO;
        *transient = curl_transient(result);
        snprintf(err, errlen, "%s: %s", req->what,
                 curl_err[0] ? curl_err : curl_easy_strerror(result));
    } else {
        long status = 0;
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
        resp->status = status;
        if (resp->streamed) {
            rc = eph_sse_finish(&a->sse);
            if (rc == -EMSGSIZE)
                snprintf(err, errlen, "%s: response too large (event line over %zu bytes)",
                         req->what, req->sse_line_max);
        }
    }
    return rc;
}

static int http_attempt(const struct eph_http_request *req, struct curl_slist *headers,
                        struct eph_http_response *resp, bool *transient, char *err, size_t errlen)
{
    struct attempt a = {.req = req, .resp = resp};
    char curl_err[CURL_ERROR_SIZE] = "";
    int rc = 0;
    *transient = false;
    resp->status = 0;
    resp->streamed = false;
    resp->sent = resp->idle = resp->stopped = resp->transient = false;
    eph_buf_reset(&resp->body);
    eph_sse_init(&a.sse, req->sse_line_max ? req->sse_line_max : (1u << 20), req->on_event,
                 req->ctx);

    struct http_conn *conn = conn_borrow(req->pool);
    if (!conn) {
        rc = -ENOMEM;
        snprintf(err, errlen, "%s: cannot create an http handle", req->what);
        goto out;
    }
    CURLM *multi = conn->multi;
    a.easy = conn->easy;
    /* No limit on the whole transfer: a slow but live answer goes on until the deadline. The
     * loop below ends an attempt at the deadline or after idle_timeout_ms without a byte;
     * libcurl's own timeout is only a backstop past the deadline. */
    uint64_t left = remaining_ms(req);
    uint64_t limit = left == UINT64_MAX ? UINT64_MAX : left + 1000;
    a.last_byte_ns = eph_clock_mono_ns();
    CURL *e = a.easy;
    attempt_options(req, headers, &a, curl_err, limit);
    curl_multi_add_handle(multi, e);

    CURLcode result = CURLE_OK;
    bool done = false;
    while (!done) {
        int running = 0;
        CURLMcode mc = curl_multi_perform(multi, &running);
        if (mc != CURLM_OK) {
            rc = -EIO;
            *transient = true;
            snprintf(err, errlen, "%s: %s", req->what, curl_multi_strerror(mc));
            goto out_remove;
        }
        CURLMsg *msg;
        int queued;
        while ((msg = curl_multi_info_read(multi, &queued))) {
            if (msg->msg == CURLMSG_DONE) {
                result = msg->data.result;
                done = true;
            }
        }
        if (done)
            break;
        if (cancelled(req)) {
            rc = -ECANCELED;
            snprintf(err, errlen, "%s: call cancelled", req->what);
            goto out_remove;
        }
        uint64_t rem = remaining_ms(req);
        if (stop_grace_over(&a) || (a.stopped && rem == 0))
            break;
        if (rem == 0) {
            rc = -ETIMEDOUT;
            snprintf(err, errlen, "%s: deadline passed during the call", req->what);
            goto out_remove;
        }
        if (idle_too_long(&a)) {
            rc = -ETIMEDOUT;
            resp->idle = true;
            *transient = true;
            snprintf(err, errlen, "%s: no byte from the server for %u s", req->what,
                     req->idle_timeout_ms / 1000);
            goto out_remove;
        }
        curl_multi_poll(multi, NULL, 0, (int)(rem < POLL_SLICE_MS ? rem : POLL_SLICE_MS), NULL);
    }

    rc = attempt_result(req, &a, result, curl_err, transient, err, errlen);

out_remove : {
    curl_off_t up = 0;
    if (curl_easy_getinfo(e, CURLINFO_SIZE_UPLOAD_T, &up) == CURLE_OK && up >= 0 &&
        (uint64_t)up >= req->body_len)
        resp->sent = true;
}
    curl_multi_remove_handle(multi, e);
    conn_return(req->pool, conn);
out:
    eph_sse_release(&a.sse);
    return rc;
}

/* ---- retries ---- */

bool eph_http_status_retryable(long status)
{
    return status == 408 || status == 409 || status == 429 || (status >= 500 && status <= 599);
}

uint64_t eph_http_backoff_ms(unsigned attempt, uint64_t retry_after_ms)
{
    uint64_t d = BACKOFF_BASE_MS;
    for (unsigned i = 1; i < attempt && d < BACKOFF_MAX_MS; i++)
        d *= 2;
    if (d > BACKOFF_MAX_MS)
        d = BACKOFF_MAX_MS;
    uint32_t r = 0;
    if (eph_random_bytes(&r, sizeof(r)) != 0)
        r = (uint32_t)eph_clock_mono_ns();
    d = d / 2 + r % (d / 2 + 1);
    if (retry_after_ms > d)
        d = retry_after_ms;
    return d;
}

int eph_http_sleep(uint64_t ms, const atomic_bool *cancel)
{
    uint64_t end = eph_clock_mono_ns() + ms * 1000000u;
    for (;;) {
        if (cancel && atomic_load(cancel))
            return -ECANCELED;
        uint64_t now = eph_clock_mono_ns();
        if (now >= end)
            return 0;
        uint64_t slice = end - now;
        if (slice > (uint64_t)POLL_SLICE_MS * 1000000u)
            slice = (uint64_t)POLL_SLICE_MS * 1000000u;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)slice};
        nanosleep(&ts, NULL); /* EINTR: the loop recomputes what is left */
    }
}

int eph_http_post(const struct eph_http_request *req, struct eph_http_response *resp, char *err,
                  size_t errlen)
{
    memset(resp, 0, sizeof(*resp));
    eph_buf_init(&resp->body, req->max_body);
    if (errlen)
        err[0] = '\0';
    int rc = eph_http_global_init();
    if (rc) {
        snprintf(err, errlen, "%s: cannot initialise libcurl", req->what);
        return rc;
    }

    struct curl_slist *headers = NULL;
    for (const char *const *h = req->headers; h && *h; h++) {
        struct curl_slist *n = curl_slist_append(headers, *h);
        if (!n) {
            curl_slist_free_all(headers);
            snprintf(err, errlen, "%s: out of memory", req->what);
            return -ENOMEM;
        }
        headers = n;
    }

    unsigned max = req->max_attempts ? req->max_attempts : DEFAULT_ATTEMPTS;
    for (unsigned attempt = 1;; attempt++) {
        if (cancelled(req)) {
            rc = -ECANCELED;
            snprintf(err, errlen, "%s: call cancelled", req->what);
            break;
        }
        if (past_deadline(req)) {
            rc = -ETIMEDOUT;
            snprintf(err, errlen, "%s: deadline passed before the call", req->what);
            break;
        }
        if (req->on_attempt)
            req->on_attempt(req->ctx, attempt);
        resp->attempts = attempt;
        bool transient = false;
        err[0] = '\0';
        rc = http_attempt(req, headers, resp, &transient, err, errlen);
        resp->transient = transient;
        bool retry = rc ? transient : eph_http_status_retryable(resp->status);
        if (!retry || attempt >= max)
            break;

        uint64_t wait = eph_http_backoff_ms(attempt, rc ? 0 : resp->retry_after_ms);
        if (req->deadline_ns && eph_clock_mono_ns() + wait * 1000000u >= req->deadline_ns) {
            /* Waiting would end past the deadline: report what went wrong now rather than a
             * timeout, since that is the real reason the call failed. */
            EPH_DEBUG("model", "%s: no time left to retry after attempt %u", req->what, attempt);
            break;
        }
        if (rc)
            EPH_INFO("model", "%s; attempt %u of %u, retrying in %llu ms",
                     err[0] ? err : eph_strerror(rc), attempt, max, (unsigned long long)wait);
        else
            EPH_INFO("model", "%s: http %ld; attempt %u of %u, retrying in %llu ms", req->what,
                     resp->status, attempt, max, (unsigned long long)wait);
        int src = eph_http_sleep(wait, req->cancel);
        if (src) {
            rc = src;
            snprintf(err, errlen, "%s: call cancelled", req->what);
            break;
        }
    }
    curl_slist_free_all(headers);
    if (rc == -EIO && resp->attempts > 1) {
        size_t len = strlen(err);
        snprintf(err + len, errlen - len, " (after %u attempts)", resp->attempts);
    }
    return rc;
}

void eph_http_response_release(struct eph_http_response *resp)
{
    eph_buf_release(&resp->body);
}
