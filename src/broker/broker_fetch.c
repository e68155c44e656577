/*
 * broker_fetch.c - one run's broker: the web_fetch tool's request, made by the broker for the
 * agent. See docs/BROKER.md.
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
    /* A part of the record could not be made (out of memory): the hop's event carries none. */
    bool record_lost;
};

/* The header lines of an answer (not the status line), for the record. */
static void fetch_keep_header(struct fetch_io *io, const char *p, size_t len)
{
    while (len && (p[len - 1] == '\r' || p[len - 1] == '\n'))
        len--;
    if (!io->headers || len == 0 || (len >= 5 && memcmp(p, "HTTP/", 5) == 0))
        return;
    json_t *pair;
    int r = bk_header_pair(p, len, &pair);
    if (r < 0 || (!r && json_array_append_new(io->headers, pair))) {
        json_decref(io->headers); /* the hop is recorded whole or not at all */
        io->headers = NULL;
        io->record_lost = true;
    }
}

/* The record of one web_fetch hop: a GET of url without body, and its answer; NULL, logged, when
 * a part of it cannot be made (out of memory). */
static json_t *fetch_exchange(struct eph_broker *b, const char *url, int status,
                              struct fetch_io *io)
{
    char empty[65];
    bk_sha256_hex("", 0, empty);
    size_t keep = io->body.len < b->s.record_body_max_bytes ? io->body.len
                                                            : (size_t)b->s.record_body_max_bytes;
    json_t *x = NULL;
    if (!io->record_lost)
        x = json_pack("{s:{s:s, s:s, s:[], s:s, s:s}, s:{s:i, s:o, s:o, s:b}}", "request", "method",
                      "GET", "url", url, "headers", "body_base64", "", "body_sha256", empty,
                      "response", "status", status, "headers",
                      io->headers ? json_incref(io->headers) : json_array(), "body_base64",
                      bk_b64_json(io->body.data ? io->body.data : "", keep), "truncated",
                      io->over || io->cut || keep < io->body.len);
    if (!x)
        EPH_ERROR(COMPONENT, "cannot keep the record of a web_fetch hop: out of memory");
    return x;
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
    bk_sha256_hex("", 0, empty);
    json_t *rs = bk_replay_claim(b, "GET", url, empty);
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

/* One hop's checks: the run's allow-list, the guard around the resolver (the address in *a), the
 * fee of the request. 0, or the refusal (its event emitted, err said). */
static int fetch_allowed(struct eph_broker *b, struct req_ctx *rc0, const struct eph_http_url *u,
                         const char *cur, struct eph_addr *a, char *err, size_t errlen)
{
    if (b->nweb_allow && !eph_policy_domain_allowed(
                             u->auth.host.name, (const char *const *)b->web_allow, b->nweb_allow)) {
        rc0->ev.status = 403;
        rc0->ev.denied = "host_not_allowed";
        rc0->ev.exchange = fetch_refused(b, cur, rc0->ev.status);
        bk_emit(rc0);
        snprintf(err, errlen, "this run may not reach %s", u->auth.host.name);
        return -EACCES;
    }
    enum eph_addr_class cls;
    /* A replay resolves nothing either: nothing leaves the machine. */
    struct eph_guard g = bk_guard_of(b, true);
    int rc = b->replay ? 0 : eph_guard_resolve(&g, &u->auth.host, u->auth.port, a, &cls);
    if (rc) {
        bool no = rc == -EACCES || rc == -EPERM;
        rc0->ev.status = no ? 403 : 502;
        rc0->ev.denied = no ? "address_not_allowed" : "dns_failed";
        rc0->ev.exchange = fetch_refused(b, cur, rc0->ev.status);
        bk_emit(rc0);
        if (rc == -EPERM)
            snprintf(err, errlen, "%s:%u is the server's own address", u->auth.host.name,
                     u->auth.port);
        else if (rc == -EACCES)
            snprintf(err, errlen, "%s is not a public address (%s)", u->auth.host.name,
                     eph_addr_class_name(cls));
        else
            snprintf(err, errlen, "%s does not resolve", u->auth.host.name);
        return rc;
    }
    int fee = b->budget ? eph_meter_start(&rc0->s->meter, b->budget, eph_clock_mono_ns()) : 0;
    if (fee) {
        atomic_store(&b->exhausted, true);
        rc0->ev.status = 402;
        rc0->ev.denied = "budget_exhausted";
        rc0->ev.exchange = fetch_refused(b, cur, rc0->ev.status);
        bk_emit(rc0);
        snprintf(err, errlen, "the run's budget does not cover this request");
        return -EDQUOT;
    }
    return 0;
}

/* One hop over the network: curl gets the URL in the spelling checked and the address pinned
 * (pin.h); a redirect's Location comes back in io->location, to be parsed and checked again. */
static CURLcode fetch_live(struct eph_broker *b, const struct eph_http_url *u,
                           const struct eph_addr *a, size_t cur_size, struct fetch_io *io,
                           long *status)
{
    struct eph_buf pinned_url;
    eph_buf_init(&pinned_url, cur_size + 16);
    struct eph_pin pin = {0};
    struct curl_slist *hdrs = curl_slist_append(NULL, "Accept-Encoding: identity");
    CURL *h = curl_easy_init();
    char *redirect = NULL;
    CURLcode cr = CURLE_OUT_OF_MEMORY;
    *status = 0;
    if (h && hdrs && eph_pin_url(&pinned_url, u) == 0 && eph_pin_apply(&pin, h, &u->auth, a) == 0) {
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
        curl_easy_setopt(h, CURLOPT_HEADERDATA, io);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, fetch_body);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, io);
        cr = curl_easy_perform(h);
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
        if (curl_easy_getinfo(h, CURLINFO_REDIRECT_URL, &redirect) == CURLE_OK && redirect)
            snprintf(io->location, sizeof(io->location), "%s", redirect);
    }
    if (h)
        curl_easy_cleanup(h);
    eph_pin_release(&pin);
    eph_buf_release(&pinned_url);
    curl_slist_free_all(hdrs);
    return cr;
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
        struct eph_addr a = {0};
        if ((rc = fetch_allowed(b, &rc0, &u, cur, &a, err, errlen)))
            return rc;
        struct fetch_io io = {
            .b = b, .meter = &fake.meter, .headers = b->record ? json_array() : NULL};
        io.record_lost = b->record && !io.headers;
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
            bk_emit(&rc0);
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
        long status = 0;
        CURLcode cr = fetch_live(b, &u, &a, sizeof(cur), &io, &status);
        rc0.ev.status = status ? (int)status : 502;
        rc0.ev.bytes_down = io.bytes;
        rc0.ev.exchange = b->record && status ? fetch_exchange(b, cur, (int)status, &io)
                                              : fetch_refused(b, cur, rc0.ev.status);
        bk_emit(&rc0);
        json_decref(io.headers);
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
