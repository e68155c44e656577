/*
 * metrics.c - counters and histograms for /metrics.
 *
 * A histogram is a fixed set of cumulative-at-render buckets in seconds, a count and a sum kept in
 * nanoseconds, all atomics: an observation is a handful of relaxed increments, never a lock, so
 * that the worker and the agent loop can observe from their hot paths.
 */
#include "common/metrics.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "common/text.h"

/* Upper bounds in nanoseconds, from 1 ms (a namespace sandbox starts in a few) to 2 minutes (a
 * slow model call). The +Inf bucket is the count. */
static const uint64_t bounds_ns[] = {
    1000000ull,     2500000ull,     5000000ull,     10000000ull,     25000000ull,   50000000ull,
    100000000ull,   250000000ull,   500000000ull,   1000000000ull,   2500000000ull, 5000000000ull,
    10000000000ull, 30000000000ull, 60000000000ull, 120000000000ull,
};
#define NBOUNDS (sizeof(bounds_ns) / sizeof(bounds_ns[0]))

struct hist {
    atomic_uint_fast64_t buckets[NBOUNDS]; /* per bucket, not cumulative */
    atomic_uint_fast64_t count;
    atomic_uint_fast64_t sum_ns;
};

static void hist_observe(struct hist *h, uint64_t ns)
{
    size_t i = 0;
    while (i < NBOUNDS && ns > bounds_ns[i])
        i++;
    if (i < NBOUNDS)
        atomic_fetch_add_explicit(&h->buckets[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_ns, ns, memory_order_relaxed);
}

static void hist_reset(struct hist *h)
{
    for (size_t i = 0; i < NBOUNDS; i++)
        atomic_store(&h->buckets[i], 0);
    atomic_store(&h->count, 0);
    atomic_store(&h->sum_ns, 0);
}

/* Renders one histogram series; labels is "" or 'route="/v1/runs",' (with the trailing comma). */
static int hist_render(struct eph_buf *b, const char *name, const char *labels,
                       const struct hist *h)
{
    uint64_t cum = 0;
    int rc = 0;
    for (size_t i = 0; i < NBOUNDS && !rc; i++) {
        cum += atomic_load_explicit(&h->buckets[i], memory_order_relaxed);
        rc = eph_buf_appendf(b, "%s_bucket{%sle=\"%g\"} %llu\n", name, labels,
                             (double)bounds_ns[i] / 1e9, (unsigned long long)cum);
    }
    uint64_t count = atomic_load_explicit(&h->count, memory_order_relaxed);
    uint64_t sum = atomic_load_explicit(&h->sum_ns, memory_order_relaxed);
    /* A concurrent observation may have bumped count after the buckets were read: +Inf is never
     * below the last bucket. */
    if (count < cum)
        count = cum;
    size_t llen = strlen(labels);
    char plain[160];
    /* The sum and count carry the same labels without the trailing comma. */
    snprintf(plain, sizeof(plain), "%.*s", llen ? (int)llen - 1 : 0, labels);
    if (!rc)
        rc = eph_buf_appendf(b, "%s_bucket{%sle=\"+Inf\"} %llu\n", name, labels,
                             (unsigned long long)count);
    if (!rc)
        rc = eph_buf_appendf(b, "%s_sum%s%s%s %.9f\n", name, llen ? "{" : "", plain,
                             llen ? "}" : "", (double)sum / 1e9);
    if (!rc)
        rc = eph_buf_appendf(b, "%s_count%s%s%s %llu\n", name, llen ? "{" : "", plain,
                             llen ? "}" : "", (unsigned long long)count);
    return rc;
}

static struct hist sandbox_start, exec_latency, model_call;

void eph_metrics_observe_sandbox_start(uint64_t ns)
{
    hist_observe(&sandbox_start, ns);
}

void eph_metrics_observe_exec(uint64_t ns)
{
    hist_observe(&exec_latency, ns);
}

void eph_metrics_observe_model_call(uint64_t ns)
{
    hist_observe(&model_call, ns);
}

/* HTTP: counters by (method, route, status) and a latency histogram by route. The routes are the
 * server's fixed patterns, so a small table is enough; past it, observations are counted under
 * route "other" rather than dropped. */
#define HTTP_ROUTES_MAX 32
#define HTTP_SERIES_MAX 512

struct http_series {
    char method[8];
    char route[48];
    unsigned status;
    uint64_t count;
};

struct http_route {
    char route[48];
    struct hist latency;
};

static pthread_mutex_t http_lock = PTHREAD_MUTEX_INITIALIZER;
static struct http_series http_series[HTTP_SERIES_MAX];
static size_t http_nseries;
static struct http_route http_routes[HTTP_ROUTES_MAX];
static size_t http_nroutes;

static const char *known_method(const char *m)
{
    static const char *const verbs[] = {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"};
    for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
        if (m && strcmp(m, verbs[i]) == 0)
            return verbs[i];
    return "OTHER";
}

void eph_metrics_observe_http(const char *method, const char *route, unsigned status, uint64_t ns)
{
    const char *m = known_method(method);
    if (!route || strlen(route) >= sizeof(http_routes[0].route))
        route = "other";
    pthread_mutex_lock(&http_lock);
    size_t i;
    for (i = 0; i < http_nseries; i++)
        if (http_series[i].status == status && strcmp(http_series[i].method, m) == 0 &&
            strcmp(http_series[i].route, route) == 0)
            break;
    if (i == http_nseries && i < HTTP_SERIES_MAX) {
        snprintf(http_series[i].method, sizeof(http_series[i].method), "%s", m);
        snprintf(http_series[i].route, sizeof(http_series[i].route), "%s", route);
        http_series[i].status = status;
        http_nseries++;
    }
    if (i < http_nseries)
        http_series[i].count++;
    struct hist *h = NULL;
    for (i = 0; i < http_nroutes; i++)
        if (strcmp(http_routes[i].route, route) == 0)
            h = &http_routes[i].latency;
    if (!h && http_nroutes < HTTP_ROUTES_MAX) {
        snprintf(http_routes[http_nroutes].route, sizeof(http_routes[0].route), "%s", route);
        h = &http_routes[http_nroutes++].latency;
    }
    pthread_mutex_unlock(&http_lock);
    /* Route slots are never reused, so the histogram outlives the lock. */
    if (h)
        hist_observe(h, ns);
}

static const char *const webhook_outcomes[] = {"delivered", "retried", "failed"};
static atomic_uint_fast64_t webhook_counts[3];

void eph_metrics_count_webhook(const char *outcome)
{
    size_t i = 0;
    while (i < 2 && strcmp(outcome, webhook_outcomes[i]) != 0)
        i++;
    atomic_fetch_add_explicit(&webhook_counts[i], 1, memory_order_relaxed);
}

static int webhooks_render(struct eph_buf *b)
{
    int rc = eph_buf_appends(b, "# HELP ephemeral_webhook_deliveries_total Webhook delivery "
                                "attempts by outcome.\n"
                                "# TYPE ephemeral_webhook_deliveries_total counter\n");
    for (size_t i = 0; i < 3 && !rc; i++)
        rc = eph_buf_appendf(
            b, "ephemeral_webhook_deliveries_total{outcome=\"%s\"} %llu\n", webhook_outcomes[i],
            (unsigned long long)atomic_load_explicit(&webhook_counts[i], memory_order_relaxed));
    return rc;
}

int eph_metrics_render(struct eph_buf *b)
{
    static const struct {
        const char *name, *help;
        struct hist *h;
    } hists[] = {
        {"ephemeral_sandbox_start_seconds", "Sandbox creation to ready.", &sandbox_start},
        {"ephemeral_exec_seconds", "Commands run in sandboxes, start to exit.", &exec_latency},
        {"ephemeral_model_call_seconds", "Model call attempts, each retry apart.", &model_call},
    };
    int rc = 0;
    for (size_t i = 0; i < sizeof(hists) / sizeof(hists[0]) && !rc; i++) {
        rc = eph_buf_appendf(b, "# HELP %s %s\n# TYPE %s histogram\n", hists[i].name, hists[i].help,
                             hists[i].name);
        if (!rc)
            rc = hist_render(b, hists[i].name, "", hists[i].h);
    }
    if (!rc)
        rc = webhooks_render(b);
    if (rc)
        return rc;
    pthread_mutex_lock(&http_lock);
    rc = eph_buf_appends(b, "# HELP ephemeral_http_requests_total HTTP requests answered.\n"
                            "# TYPE ephemeral_http_requests_total counter\n");
    for (size_t i = 0; i < http_nseries && !rc; i++)
        rc = eph_buf_appendf(b,
                             "ephemeral_http_requests_total{method=\"%s\",route=\"%s\","
                             "code=\"%u\"} %llu\n",
                             http_series[i].method, http_series[i].route, http_series[i].status,
                             (unsigned long long)http_series[i].count);
    if (!rc)
        rc = eph_buf_appends(b, "# HELP ephemeral_http_request_duration_seconds HTTP requests, "
                                "first byte to completion (streams included).\n"
                                "# TYPE ephemeral_http_request_duration_seconds histogram\n");
    for (size_t i = 0; i < http_nroutes && !rc; i++) {
        char labels[sizeof(http_routes[0].route) + 16];
        rc = eph_text_format(labels, sizeof(labels), "route=\"%s\",", http_routes[i].route);
        if (!rc)
            rc = hist_render(b, "ephemeral_http_request_duration_seconds", labels,
                             &http_routes[i].latency);
    }
    pthread_mutex_unlock(&http_lock);
    return rc;
}

void eph_metrics_reset(void)
{
    hist_reset(&sandbox_start);
    hist_reset(&exec_latency);
    hist_reset(&model_call);
    for (size_t i = 0; i < 3; i++)
        atomic_store(&webhook_counts[i], 0);
    pthread_mutex_lock(&http_lock);
    for (size_t i = 0; i < http_nroutes; i++)
        hist_reset(&http_routes[i].latency);
    http_nseries = 0;
    http_nroutes = 0;
    pthread_mutex_unlock(&http_lock);
}
