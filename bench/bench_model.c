/*
 * bench_model.c - what keeping the model's connections saves: the time of one model call against
 * a local fake model server (tests/fake_model_server.py, started by bench/bench.py) with the
 * connection reused, next to the same call on a fresh connection (docs/BENCH.md).
 *
 *   build/bench/bench_model URL CALLS [CAFILE]
 *
 * Without CAFILE (plain HTTP) both variants go through the HTTP client the providers use,
 * eph_http_post: with the model's pool (the connection kept) and without one (a handle, so a
 * connection, per call). With CAFILE (HTTPS to a server whose self-signed certificate it is) the
 * client cannot be given that certificate, so this program drives libcurl itself the same way: one
 * easy handle kept for every call (connection and TLS session reused), or a new one per call (a
 * TCP connection and a full handshake each time). The two variants alternate call by call after a
 * warm-up, so that drift on the machine touches both alike. Prints a Markdown table row per variant
 * and, last, one line "json {...}" with the figures.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "agent/http_client.h"
#include "common/clock.h"

#define WARMUP 10

static const char body[] = "{\"model\":\"fake\",\"messages\":[{\"role\":\"user\",\"content\":"
                           "\"ping\"}],\"max_tokens\":16}";
static const char *const headers[] = {"Content-Type: application/json",
                                      "Authorization: Bearer bench", NULL};

struct variant {
    const char *name;
    double *us;
    unsigned n;
    unsigned failed;
};

/* ---- through eph_http_post ---- */

static int post_client(const char *url, struct eph_http_pool *pool)
{
    struct eph_http_request req = {.what = "bench",
                                   .url = url,
                                   .headers = headers,
                                   .body = body,
                                   .body_len = sizeof(body) - 1,
                                   .deadline_ns = eph_clock_mono_ns() + 30ull * 1000000000u,
                                   .max_body = 1u << 20,
                                   .max_attempts = 1,
                                   .pool = pool};
    struct eph_http_response resp;
    char err[256];
    int rc = eph_http_post(&req, &resp, err, sizeof(err));
    if (!rc && resp.status != 200)
        rc = -1;
    if (rc)
        fprintf(stderr, "bench_model: %s (status %ld)\n", err, resp.status);
    eph_http_response_release(&resp);
    return rc;
}

/* ---- libcurl driven directly (HTTPS with the bench's own certificate) ---- */

static size_t discard(char *p, size_t size, size_t nmemb, void *ud)
{
    (void)p;
    (void)ud;
    return size * nmemb;
}

static int post_curl(CURL *e, const char *url, const char *cafile, struct curl_slist *hdrs)
{
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)(sizeof(body) - 1));
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(e, CURLOPT_CAINFO, cafile);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT, 30L);
    CURLcode c = curl_easy_perform(e);
    long status = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    if (c != CURLE_OK || status != 200) {
        fprintf(stderr, "bench_model: %s (status %ld)\n", curl_easy_strerror(c), status);
        return -1;
    }
    return 0;
}

/* ---- the loop ---- */

struct ctx {
    const char *url, *cafile;
    struct eph_http_pool *pool; /* plain HTTP, the reused variant */
    CURL *kept;                 /* HTTPS, the reused variant */
    struct curl_slist *hdrs;
};

static int one_call(struct ctx *c, bool reuse)
{
    if (!c->cafile)
        return post_client(c->url, reuse ? c->pool : NULL);
    if (reuse)
        return post_curl(c->kept, c->url, c->cafile, c->hdrs);
    CURL *e = curl_easy_init();
    if (!e)
        return -1;
    int rc = post_curl(e, c->url, c->cafile, c->hdrs);
    curl_easy_cleanup(e);
    return rc;
}

static void timed(struct ctx *c, struct variant *v, bool reuse)
{
    uint64_t t0 = eph_clock_mono_ns();
    if (one_call(c, reuse) != 0) {
        v->failed++;
        return;
    }
    v->us[v->n++] = (double)(eph_clock_mono_ns() - t0) / 1000.0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(struct variant *v, unsigned q)
{
    if (!v->n)
        return 0;
    return v->us[(size_t)v->n * q / 100 < v->n ? (size_t)v->n * q / 100 : v->n - 1];
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_model URL CALLS [CAFILE]\n");
        return 2;
    }
    unsigned calls = (unsigned)strtoul(argv[2], NULL, 10);
    if (calls == 0 || calls > 100000 || eph_http_global_init() != 0)
        return 2;
    struct ctx c = {.url = argv[1], .cafile = argc > 3 ? argv[3] : NULL};
    c.pool = eph_http_pool_new(1);
    c.kept = curl_easy_init();
    for (const char *const *h = headers; *h; h++)
        c.hdrs = curl_slist_append(c.hdrs, *h);
    struct variant v[2] = {
        {.name = "connection reused", .us = calloc(calls, sizeof(double))},
        {.name = "new connection per call", .us = calloc(calls, sizeof(double))}};
    if (!c.pool || !c.kept || !c.hdrs || !v[0].us || !v[1].us)
        return 1;
    for (unsigned i = 0; i < WARMUP; i++) {
        one_call(&c, true);
        one_call(&c, false);
    }
    for (unsigned i = 0; i < calls; i++) {
        bool first = i % 2 == 0; /* which goes first alternates */
        timed(&c, &v[first ? 0 : 1], first);
        timed(&c, &v[first ? 1 : 0], !first);
    }
    const char *how = c.cafile ? "HTTPS, libcurl" : "HTTP, eph_http_post";
    for (int k = 0; k < 2; k++) {
        qsort(v[k].us, v[k].n, sizeof(double), cmp_double);
        printf("| %s, %s | %.0f | %.0f | %.0f | %u |\n", how, v[k].name, pct(&v[k], 50),
               pct(&v[k], 90), pct(&v[k], 99), v[k].n);
    }
    printf("json {\"tls\": %s, \"calls\": %u, \"reused\": {\"median_us\": %.1f, \"p90_us\": %.1f, "
           "\"p99_us\": %.1f, \"failed\": %u}, \"fresh\": {\"median_us\": %.1f, \"p90_us\": %.1f, "
           "\"p99_us\": %.1f, \"failed\": %u}}\n",
           c.cafile ? "true" : "false", calls, pct(&v[0], 50), pct(&v[0], 90), pct(&v[0], 99),
           v[0].failed, pct(&v[1], 50), pct(&v[1], 90), pct(&v[1], 99), v[1].failed);
    unsigned failed = v[0].failed + v[1].failed;
    curl_slist_free_all(c.hdrs);
    curl_easy_cleanup(c.kept);
    eph_http_pool_free(c.pool);
    free(v[0].us);
    free(v[1].us);
    return failed ? 1 : 0;
}
