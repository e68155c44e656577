/*
 * webhooks.c - signed webhooks (docs/WEBHOOKS.md): the URL rule, the event of a settlement, the
 * signature, the retry schedule, and the senders.
 */
#include "run/webhooks.h"

#include <errno.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>
#include <sodium.h>

#include "broker/broker.h"
#include "broker/http.h"
#include "broker/pin.h"
#include "common/buf.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/secret.h"
#include "common/version.h"
#include "run/service.h"

/* A run's indexed by status - EPH_RUN_COMPLETED ("run." and the status's name), then a
 * sandbox's, whatever ended it (its status says why). */
const char *const eph_webhook_event_types[] = {
    "run.completed", "run.failed", "run.timed_out", "run.budget_exhausted", "run.cancelled",
    "sandbox.ended", NULL,
};
#define SANDBOX_ENDED 5

/* Sender threads: a receiver that hangs holds one of them up to its timeout, not every delivery. */
#define SENDERS 2
/* How often an idle sender looks for due deliveries without being woken. */
#define POLL_MS 1000
/* A claim lasts the longest attempt and this margin; a sender that died is replaced after it. */
#define CLAIM_MS ((60 + 30) * 1000)
/* The longest delay between two attempts. */
#define MAX_DELAY_MS (3600 * 1000)
/* What is read of a receiver's answer (and thrown away): past it, the attempt is cut. */
#define ANSWER_CAP (64 * 1024)

bool eph_webhook_event_type_known(const char *type)
{
    for (size_t i = 0; eph_webhook_event_types[i]; i++)
        if (strcmp(type, eph_webhook_event_types[i]) == 0)
            return true;
    return false;
}

/* The parsed URL and its address (u points into url). */
static int check_url(const struct eph_config *cfg, const struct eph_guard_own *own, const char *url,
                     struct eph_http_url *u, struct eph_addr *out, char *why, size_t whylen)
{
    size_t len = strlen(url);
    size_t scheme = strncasecmp(url, "https://", 8) == 0  ? 8
                    : strncasecmp(url, "http://", 7) == 0 ? 7
                                                          : 0;
    if (!scheme) {
        snprintf(why, whylen, "url must be an http:// or https:// URL");
        return -EINVAL;
    }
    if (len > EPH_WEBHOOK_URL_MAX) {
        snprintf(why, whylen, "url is longer than %d characters", EPH_WEBHOOK_URL_MAX);
        return -EINVAL;
    }
    size_t auth_len = strcspn(url + scheme, "/?#");
    if (memchr(url + scheme, '@', auth_len)) {
        snprintf(why, whylen, "url must not carry a user name or password");
        return -EINVAL;
    }
    if (eph_http_parse_url(url, len, u)) {
        snprintf(why, whylen, "url is not a valid URL");
        return -EINVAL;
    }
    struct eph_cidr allow[EPH_BROKER_MAX_ALLOW_CIDRS];
    size_t nallow = 0;
    for (size_t i = 0;
         i < cfg->webhooks.nallow_private_cidrs && nallow < EPH_BROKER_MAX_ALLOW_CIDRS; i++)
        if (eph_cidr_parse(cfg->webhooks.allow_private_cidrs[i], &allow[nallow]) == 0)
            nallow++;
    const struct eph_guard g = {.allow = allow, .nallow = nallow, .own = own};
    enum eph_addr_class cls = EPH_ADDR_PUBLIC;
    int rc = eph_guard_resolve(&g, &u->auth.host, u->auth.port, out, &cls);
    if (rc == -EACCES)
        snprintf(why, whylen,
                 "url points at a %s address, which webhooks may not reach "
                 "(webhooks.allow_private_cidrs opens a range)",
                 eph_addr_class_name(cls));
    else if (rc == -EPERM)
        snprintf(why, whylen, "url points at this server's own address");
    else if (rc == -ENOENT)
        snprintf(why, whylen, "url's host does not resolve");
    else if (rc)
        snprintf(why, whylen, "url's host cannot be checked: %s", eph_strerror(rc));
    return rc;
}

int eph_webhook_check_url(const struct eph_config *cfg, const struct eph_guard_own *own,
                          const char *url, struct eph_addr *out, char *why, size_t whylen)
{
    struct eph_http_url u;
    struct eph_addr a;
    int rc = check_url(cfg, own, url, &u, &a, why, whylen);
    if (!rc && out)
        *out = a;
    return rc;
}

void eph_webhook_secret_new(char out[EPH_WEBHOOK_SECRET_LEN])
{
    unsigned char raw[24];
    randombytes_buf(raw, sizeof(raw));
    memcpy(out, "whsec_", 6);
    sodium_bin2hex(out + 6, EPH_WEBHOOK_SECRET_LEN - 6, raw, sizeof(raw));
    sodium_memzero(raw, sizeof(raw));
}

void eph_webhook_sign(const char *secret, int64_t t, const char *body, size_t len,
                      char out[EPH_WEBHOOK_SIGNATURE_MAX])
{
    char ts[24];
    int n = snprintf(ts, sizeof(ts), "%lld.", (long long)t);
    crypto_auth_hmacsha256_state st;
    unsigned char mac[crypto_auth_hmacsha256_BYTES];
    crypto_auth_hmacsha256_init(&st, (const unsigned char *)secret, strlen(secret));
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)ts, (unsigned long long)n);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)body, len);
    crypto_auth_hmacsha256_final(&st, mac);
    char hex[2 * crypto_auth_hmacsha256_BYTES + 1];
    sodium_bin2hex(hex, sizeof(hex), mac, sizeof(mac));
    snprintf(out, EPH_WEBHOOK_SIGNATURE_MAX, "t=%lld,v1=%s", (long long)t, hex);
    sodium_memzero(&st, sizeof(st));
}

int eph_webhook_event_make(json_t *run_object, const struct eph_run *r,
                           struct eph_webhook_event *ev, char **body)
{
    memset(ev, 0, sizeof(*ev));
    *body = NULL;
    if (!run_object || !eph_run_status_terminal(r->status))
        return -EINVAL;
    if (eph_id_hex("evt_", 16, ev->id, sizeof(ev->id)))
        return -EIO;
    ev->type = eph_webhook_event_types[r->kind == EPH_KIND_SANDBOX ? SANDBOX_ENDED
                                                                   : r->status - EPH_RUN_COMPLETED];
    ev->created_at_ms = eph_clock_real_ms();
    json_t *data = json_deep_copy(run_object);
    if (!data)
        return -ENOMEM;
    if (r->zdr) {
        /* Nothing the run was given or made: docs/API.md, "Zero data retention". */
        static const char *const given[] = {"prompt", "result"};
        for (size_t i = 0; i < 2; i++)
            if (json_object_get(data, given[i]))
                json_object_set_new(data, given[i], json_null());
        json_object_del(data, "outputs");
    }
    char at[32];
    json_t *o = json_pack(
        "{s:s, s:s, s:s, s:s, s:o}", "id", ev->id, "object", "event", "type", ev->type,
        "created_at", eph_clock_format_iso8601(ev->created_at_ms, at, sizeof(at)), "data", data);
    *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!*body)
        return -ENOMEM;
    ev->body = *body;
    return 0;
}

int64_t eph_webhook_retry_delay_ms(unsigned base_ms, unsigned attempts)
{
    int64_t d = base_ms ? base_ms : 1;
    for (unsigned i = 1; i < attempts && d < MAX_DELAY_MS; i++)
        d *= 2;
    if (d > MAX_DELAY_MS)
        d = MAX_DELAY_MS;
    return d - (int64_t)randombytes_uniform((uint32_t)(d / 2 + 1));
}

/* ---- the senders ---- */

struct eph_webhooks {
    struct eph_service *svc;
    pthread_t threads[SENDERS];
    unsigned nthreads;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool stop;
    atomic_bool stopping; /* read by curl's progress callback, without the lock */
    unsigned long kicks;
    unsigned started; /* sender threads that have begun (the first one polls) */
};

/* One attempt's outcome, as recorded. */
struct outcome {
    int status;
    char error[200];
    bool delivered;
    bool interrupted; /* by the server's shutdown: tried again at once after the restart */
};

static int progress(void *ctx, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                    curl_off_t ulnow)
{
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    return atomic_load((atomic_bool *)ctx) ? 1 : 0;
}

static size_t answer_sink(char *p, size_t size, size_t n, void *ctx)
{
    (void)p;
    size_t *seen = ctx;
    *seen += size * n;
    return *seen > ANSWER_CAP ? 0 : size * n;
}

/* The secret of a delivery, opened: malloc'd, NULL when it cannot be. The key is read for each
 * delivery and never created here: an endpoint's secret was sealed with it, so it exists when
 * there is something to send, and a server that has none yet must not make one at start-up
 * (docs/CONFIG.md: the key file is created on first use). */
static char *open_secret(struct eph_webhooks *w, const char *sealed_hex)
{
    struct eph_secret key;
    char err[256];
    if (eph_secret_load(w->svc->cfg->secret_key_file, false, &key, err, sizeof(err))) {
        EPH_WARN("webhooks", "cannot open an endpoint's secret: %s", err);
        return NULL;
    }
    size_t hexlen = strlen(sealed_hex), len = 0;
    unsigned char *sealed = malloc(hexlen / 2 + 1);
    unsigned char *plain = NULL;
    size_t plen = 0;
    if (sealed &&
        sodium_hex2bin(sealed, hexlen / 2 + 1, sealed_hex, hexlen, NULL, &len, NULL) == 0 &&
        eph_secret_open(&key, sealed, len, &plain, &plen) != 0)
        plain = NULL;
    eph_secret_clear(&key);
    free(sealed);
    return (char *)plain;
}

/* POSTs body to the pinned address of url; fills o. */
static void post(struct eph_webhooks *w, const struct eph_webhook_delivery *d,
                 const struct eph_http_url *u, const struct eph_addr *addr, const char *signature,
                 struct outcome *o)
{
    struct eph_buf url;
    eph_buf_init(&url, EPH_WEBHOOK_URL_MAX + 64);
    struct eph_pin pin = {0};
    struct curl_slist *hdrs = NULL;
    char sig[EPH_WEBHOOK_SIGNATURE_MAX + 32], evt[64];
    snprintf(sig, sizeof(sig), "Ephemeral-Signature: %s", signature);
    snprintf(evt, sizeof(evt), "Ephemeral-Event-Id: %s", d->event_id);
    const char *const lines[] = {"Content-Type: application/json", sig, evt, "Expect:"};
    CURL *h = curl_easy_init();
    bool headers_ok = true;
    for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]) && headers_ok; i++) {
        struct curl_slist *n = curl_slist_append(hdrs, lines[i]);
        headers_ok = n != NULL;
        if (n)
            hdrs = n;
    }
    size_t seen = 0;
    unsigned timeout = d->timeout_seconds ? d->timeout_seconds : 10;
    if (!h || !headers_ok || eph_pin_url(&url, u) || eph_pin_apply(&pin, h, &u->auth, addr)) {
        snprintf(o->error, sizeof(o->error), "cannot prepare the request");
        goto out;
    }
    curl_easy_setopt(h, CURLOPT_URL, url.data);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, d->body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(d->body));
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(h, CURLOPT_USERAGENT, "ephemeral-webhooks/" EPH_VERSION);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, (long)timeout);
    if (w->svc->cfg->broker.extra_ca_file) {
        /* The operator's CAs beside the system's, as for the broker's upstreams. */
        curl_easy_setopt(h, CURLOPT_CAINFO, w->svc->cfg->broker.extra_ca_file);
        curl_easy_setopt(h, CURLOPT_CAPATH, "/etc/ssl/certs");
    }
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, answer_sink);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &seen);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &w->stopping);
    CURLcode cc = curl_easy_perform(h);
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    o->status = (int)code;
    /* The status is the receiver's word: a 2xx is received, whatever its body then does. */
    if (code >= 200 && code < 300) {
        o->delivered = true;
    } else if (code >= 300 && code < 400) {
        snprintf(o->error, sizeof(o->error), "HTTP %ld: redirects are not followed", code);
    } else if (code) {
        snprintf(o->error, sizeof(o->error), "HTTP %ld", code);
    } else if (cc == CURLE_ABORTED_BY_CALLBACK) {
        o->interrupted = true;
        snprintf(o->error, sizeof(o->error), "interrupted by the server's shutdown");
    } else if (pin.refused) {
        snprintf(o->error, sizeof(o->error), "connection to another address refused");
    } else if (cc == CURLE_OPERATION_TIMEDOUT) {
        snprintf(o->error, sizeof(o->error), "no answer within %u s", timeout);
    } else {
        snprintf(o->error, sizeof(o->error), "%s", curl_easy_strerror(cc));
    }
out:
    if (h)
        curl_easy_cleanup(h);
    eph_pin_release(&pin);
    curl_slist_free_all(hdrs);
    eph_buf_release(&url);
}

/* One attempt of d: the URL checked again (its address may have changed since it was created),
 * signed, sent, and its outcome recorded. */
struct claim_ctx {
    struct eph_webhooks *w;
    unsigned sent;
};

static int send_one(const struct eph_webhook_delivery *d, void *ctx)
{
    struct claim_ctx *cc = ctx;
    struct eph_webhooks *w = cc->w;
    cc->sent++;
    struct eph_service *svc = w->svc;
    uint64_t t0 = eph_clock_mono_ns();
    struct outcome o = {0};
    struct eph_http_url u;
    struct eph_addr addr;
    char why[sizeof(o.error)];
    char *secret = open_secret(w, d->secret_sealed);
    if (!secret) {
        snprintf(o.error, sizeof(o.error), "the endpoint's secret cannot be opened");
    } else if (check_url(svc->cfg, &svc->broker_own, d->url, &u, &addr, why, sizeof(why))) {
        memcpy(o.error, why, sizeof(o.error));
    } else {
        char sig[EPH_WEBHOOK_SIGNATURE_MAX];
        eph_webhook_sign(secret, eph_clock_real_ms() / 1000, d->body, strlen(d->body), sig);
        post(w, d, &u, &addr, sig, &o);
    }
    if (secret) {
        sodium_memzero(secret, strlen(secret));
        free(secret);
    }
    int64_t now = eph_clock_real_ms();
    int64_t next =
        o.interrupted
            ? now
            : now + eph_webhook_retry_delay_ms(svc->cfg->webhooks.retry_base_ms, d->attempts + 1);
    bool expired = !o.interrupted &&
                   next > d->created_at_ms + (int64_t)svc->cfg->webhooks.max_age_seconds * 1000;
    const char *state = o.delivered ? "delivered" : expired ? "failed" : "pending";
    struct eph_webhook_attempt a = {.event_id = d->event_id,
                                    .webhook_id = d->webhook_id,
                                    .node_id = svc->node_id,
                                    .state = state,
                                    .at_ms = now,
                                    .next_attempt_at_ms = next,
                                    .status = o.status,
                                    .duration_ms = (int64_t)((eph_clock_mono_ns() - t0) / 1000000),
                                    .error = o.delivered ? NULL : o.error};
    eph_metrics_count_webhook(o.delivered ? "delivered" : expired ? "failed" : "retried");
    if (o.delivered)
        EPH_INFO("webhooks", "%s to %s delivered (HTTP %d)", d->event_id, d->webhook_id, o.status);
    else
        EPH_WARN("webhooks", "%s to %s, attempt %u: %s; %s", d->event_id, d->webhook_id,
                 d->attempts + 1, o.error, expired ? "given up" : "retried later");
    int rc = svc->store->ops->webhook_record(svc->store, &a);
    if (rc)
        EPH_WARN("webhooks", "%s to %s: outcome not recorded: %s", d->event_id, d->webhook_id,
                 eph_strerror(rc));
    return 0;
}

/* The first sender looks for due deliveries every POLL_MS; the others sleep until woken (a
 * settlement here, or a sender that found work), so that an idle node asks the store once a
 * POLL_MS. */
static void *sender_main(void *arg)
{
    struct eph_webhooks *w = arg;
    struct eph_store *st = w->svc->store;
    pthread_mutex_lock(&w->lock);
    bool poller = w->started++ == 0;
    while (!w->stop) {
        unsigned long kicks = w->kicks;
        pthread_mutex_unlock(&w->lock);
        struct claim_ctx cc = {w, 0};
        int64_t now = eph_clock_real_ms();
        int rc = st->ops->webhook_claim(st, w->svc->node_id, now, now + CLAIM_MS, 1, send_one, &cc);
        if (rc)
            EPH_WARN("webhooks", "cannot claim deliveries: %s", eph_strerror(rc));
        pthread_mutex_lock(&w->lock);
        if (!rc && cc.sent) {
            /* There may be more: every sender looks, this one at once. */
            w->kicks++;
            pthread_cond_broadcast(&w->cond);
        } else if (w->kicks == kicks && !w->stop) {
            struct timespec ts;
            eph_clock_timespec(eph_clock_mono_ns() + (uint64_t)POLL_MS * 1000000u, &ts);
            if (poller)
                pthread_cond_timedwait(&w->cond, &w->lock, &ts);
            else
                pthread_cond_wait(&w->cond, &w->lock);
        }
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

struct eph_webhooks *eph_webhooks_start(struct eph_service *svc)
{
    struct eph_webhooks *w = calloc(1, sizeof(*w));
    if (!w)
        return NULL;
    w->svc = svc;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&w->lock, NULL);
    for (unsigned i = 0; i < SENDERS; i++)
        if (pthread_create(&w->threads[i], NULL, sender_main, w) == 0)
            w->nthreads++;
    if (!w->nthreads) {
        EPH_ERROR("webhooks", "no deliveries: cannot start a sender thread");
        eph_webhooks_stop(w);
        return NULL;
    }
    return w;
}

void eph_webhooks_kick(struct eph_webhooks *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    w->kicks++;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

void eph_webhooks_stop(struct eph_webhooks *w)
{
    if (!w)
        return;
    atomic_store(&w->stopping, true);
    pthread_mutex_lock(&w->lock);
    w->stop = true;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
    for (unsigned i = 0; i < w->nthreads; i++)
        pthread_join(w->threads[i], NULL);
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
    free(w);
}
