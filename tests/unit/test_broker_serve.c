/* The broker's stream server against faulty upstreams, without a sandbox: each test hands the
 * broker one end of a socket pair (as the tunnel does) and plays the program on the other. A
 * loopback upstream in this process misbehaves on purpose: slow, reset mid-body, garbage, and
 * 1,000 tiny requests in a row; close() during a stalled download returns at once. Every case ends
 * with a clear answer or a closed stream, never a stuck thread, and no descriptor is left open
 * (run under ASan by `make SANITIZE=address,undefined`, no leak either). The same upstream echoes
 * what it got (/echo) for the chunked uploads, the query-parameter credential and the record of
 * each exchange; a replaying broker answers from that record and the upstream counts that it was
 * never contacted. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <sodium.h>

#include "broker/broker.h"
#include "common/clock.h"

#define SECRET "qk-5ecret-value"

static int up_fd = -1;
static unsigned up_port;
static atomic_bool up_stop;
static pthread_t up_thread;
static atomic_int up_served;
static atomic_int up_active; /* upstream connections still open (their threads hold a socket) */

/* One upstream connection: reads the head, then behaves as its path says. */
static void *up_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char head[4096];
    size_t have = 0;
    while (have < sizeof(head) - 1) {
        ssize_t r = recv(fd, head + have, sizeof(head) - 1 - have, 0);
        if (r <= 0)
            goto out;
        have += (size_t)r;
        head[have] = '\0';
        if (strstr(head, "\r\n\r\n"))
            break;
    }
    atomic_fetch_add(&up_served, 1);
    if (strstr(head, " /garbage")) {
        static const char g[] = "NOT HTTP AT ALL\r\n\r\n\x01\x02";
        (void)!write(fd, g, sizeof(g) - 1);
    } else if (strstr(head, " /slow")) {
        /* Says nothing until the broker gives up and closes. */
        struct pollfd p = {.fd = fd, .events = POLLIN};
        while (!atomic_load(&up_stop) && poll(&p, 1, 100) == 0)
            ;
    } else if (strstr(head, " /stall")) {
        static const char h[] = "HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\npartial";
        (void)!write(fd, h, sizeof(h) - 1);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        while (!atomic_load(&up_stop) && poll(&p, 1, 100) == 0)
            ;
    } else if (strstr(head, " /echo")) {
        /* The request line and the body (Content-Length only: the broker frames what it sends). */
        char *cl = strcasestr(head, "\r\ncontent-length:");
        size_t want = cl ? strtoul(cl + 17, NULL, 10) : 0, at = strstr(head, "\r\n\r\n") - head + 4;
        char body[8192];
        size_t got = have - at < sizeof(body) ? have - at : 0;
        memcpy(body, head + at, got);
        while (got < want && got < sizeof(body)) {
            ssize_t r = recv(fd, body + got, sizeof(body) - got, 0);
            if (r <= 0)
                break;
            got += (size_t)r;
        }
        char ans[16384];
        int bn = snprintf(ans, sizeof(ans), "line=%.*s body=%.*s",
                          (int)(strstr(head, "\r\n") - head), head, (int)got, body);
        char hd[128];
        int hn = snprintf(hd, sizeof(hd),
                          "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Up: 1\r\n"
                          "Content-Length: %d\r\n\r\n",
                          bn);
        (void)!write(fd, hd, (size_t)hn);
        (void)!write(fd, ans, (size_t)bn);
    } else if (strstr(head, " /reset")) {
        static const char h[] = "HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\nsome bytes";
        (void)!write(fd, h, sizeof(h) - 1);
        struct linger l = {.l_onoff = 1, .l_linger = 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    } else {
        static const char ok[] =
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
        (void)!write(fd, ok, sizeof(ok) - 1);
    }
out:
    close(fd);
    atomic_fetch_sub(&up_active, 1);
    return NULL;
}

static void *up_main(void *arg)
{
    while (!atomic_load(&up_stop)) {
        struct pollfd p = {.fd = up_fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        int c = accept4(up_fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            continue;
        pthread_t t;
        atomic_fetch_add(&up_active, 1);
        if (pthread_create(&t, NULL, up_conn, (void *)(intptr_t)c) == 0) {
            pthread_detach(t);
        } else {
            close(c);
            atomic_fetch_sub(&up_active, 1);
        }
    }
    return NULL;
}

/* The process's open descriptors, once the test's own upstream has closed its connections (its
 * threads are this process's too). */
static int count_fds(void)
{
    for (int i = 0; i < 500 && atomic_load(&up_active) > 0; i++)
        usleep(10000);
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static int setup(void **state)
{
    up_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof(sa);
    if (bind(up_fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(up_fd, 128) ||
        getsockname(up_fd, (struct sockaddr *)&sa, &l))
        return -1;
    up_port = ntohs(sa.sin_port);
    atomic_store(&up_stop, false);
    return pthread_create(&up_thread, NULL, up_main, NULL);
}

static int teardown(void **state)
{
    atomic_store(&up_stop, true);
    pthread_join(up_thread, NULL);
    close(up_fd);
    return 0;
}

static atomic_int events;
static pthread_mutex_t rec_lock = PTHREAD_MUTEX_INITIALIZER;
static json_t *recorded; /* every event's exchange, in order */
static json_t *denials;  /* every event's denial reason (or null) */
static void on_event(void *arg, const struct eph_broker_event *ev)
{
    atomic_fetch_add(&events, 1);
    pthread_mutex_lock(&rec_lock);
    if (recorded && ev->exchange)
        json_array_append(recorded, ev->exchange);
    if (denials)
        json_array_append_new(denials, ev->denied ? json_string(ev->denied) : json_null());
    pthread_mutex_unlock(&rec_lock);
}

static struct eph_broker *make_rec(bool web, unsigned timeout_s,
                                   const struct eph_broker_conn *conns, size_t nconns, bool record,
                                   size_t record_max)
{
    struct eph_broker_settings s;
    eph_broker_settings_default(&s);
    assert_int_equal(eph_cidr_parse("127.0.0.1/32", &s.allow_private[0]), 0);
    s.nallow_private = 1;
    s.web_private[0] = s.allow_private[0];
    s.nweb_private = 1;
    s.request_timeout_seconds = timeout_s;
    s.record_body_max_bytes = record_max;
    struct eph_broker_run run = {
        .web = web, .conns = conns, .nconns = nconns, .on_event = on_event, .record = record};
    struct eph_broker *b;
    assert_int_equal(eph_broker_new(&s, &run, &b), 0);
    return b;
}

static struct eph_broker *make(bool web, unsigned timeout_s, const struct eph_broker_conn *conns,
                               size_t nconns)
{
    struct eph_broker_settings s;
    eph_broker_settings_default(&s);
    assert_int_equal(eph_cidr_parse("127.0.0.1/32", &s.allow_private[0]), 0);
    s.nallow_private = 1;
    s.web_private[0] = s.allow_private[0];
    s.nweb_private = 1;
    s.request_timeout_seconds = timeout_s;
    struct eph_broker_run run = {
        .web = web, .conns = conns, .nconns = nconns, .on_event = on_event};
    struct eph_broker *b;
    assert_int_equal(eph_broker_new(&s, &run, &b), 0);
    return b;
}

/* Sends one request through a new stream and reads the whole answer (bounded). */
static char *exchange(struct eph_broker *b, uint32_t id, const char *req)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    assert_int_equal(eph_broker_on_stream(b, id, sv[1]), 0);
    assert_int_equal(write(sv[0], req, strlen(req)), (ssize_t)strlen(req));
    size_t cap = 1 << 16, have = 0;
    char *buf = malloc(cap + 1);
    uint64_t end = eph_clock_mono_ns() + 20000000000ull;
    while (have < cap && eph_clock_mono_ns() < end) {
        struct pollfd p = {.fd = sv[0], .events = POLLIN};
        if (poll(&p, 1, 1000) <= 0)
            continue;
        ssize_t r = read(sv[0], buf + have, cap - have);
        if (r <= 0)
            break;
        have += (size_t)r;
    }
    buf[have] = '\0';
    close(sv[0]);
    return buf;
}

static char *request(const char *method, const char *target)
{
    char *s = NULL;
    if (asprintf(&s, "%s %s HTTP/1.1\r\nHost: x\r\n\r\n", method, target) < 0)
        return NULL;
    return s;
}

static void test_faults_web(void **state)
{
    int fds = count_fds();
    struct eph_broker *b = make(true, 2, NULL, 0);
    char url[128], *req, *ans;

    snprintf(url, sizeof(url), "http://127.0.0.1:%u/ok", up_port);
    req = request("GET", url);
    ans = exchange(b, 1, req);
    assert_non_null(strstr(ans, "HTTP/1.1 200 OK"));
    assert_non_null(strstr(ans, "\r\n\r\nok"));
    free(ans);
    free(req);

    /* Garbage from the upstream is relayed as it is for plain web (the program parses it). */
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/garbage", up_port);
    req = request("GET", url);
    ans = exchange(b, 3, req);
    assert_non_null(strstr(ans, "NOT HTTP AT ALL"));
    free(ans);
    free(req);

    /* A silent upstream: the stream ends at the request's time limit. */
    uint64_t t0 = eph_clock_mono_ns();
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/slow", up_port);
    req = request("GET", url);
    ans = exchange(b, 5, req);
    assert_string_equal(ans, "");
    assert_true(eph_clock_mono_ns() - t0 < 15000000000ull);
    free(ans);
    free(req);

    /* Reset mid-body: what came is relayed, then the stream ends. */
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/reset", up_port);
    req = request("GET", url);
    ans = exchange(b, 7, req);
    assert_non_null(strstr(ans, "HTTP/1.1 200 OK"));
    free(ans);
    free(req);

    /* A malformed request: 400, nothing upstream. */
    int before = atomic_load(&up_served);
    ans = exchange(b, 9, "GET /\nHost: x\r\n\r\n");
    assert_non_null(strstr(ans, "400 Bad Request"));
    assert_non_null(strstr(ans, "bad_request"));
    free(ans);
    assert_int_equal(atomic_load(&up_served), before);

    eph_broker_free(b);
    assert_int_equal(count_fds(), fds);
}

static void test_faults_connection(void **state)
{
    int fds = count_fds();
    char base[64];
    snprintf(base, sizeof(base), "http://127.0.0.1:%u", up_port);
    static const char *const methods[] = {"GET", "POST"};
    static const char *const hn[] = {"Authorization"};
    static const char *const hv[] = {"Bearer k-123456"};
    struct eph_broker_conn c = {.name = "api",
                                .base_url = base,
                                .methods = methods,
                                .nmethods = 2,
                                .header_names = hn,
                                .header_values = hv,
                                .nheaders = 1};
    struct eph_broker *b = make(false, 2, &c, 1);
    char *ans = exchange(b, 1, "GET /api/ok HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_non_null(strstr(ans, "HTTP/1.1 200 OK"));
    free(ans);
    /* Garbage: a clear 502 to the program. */
    ans = exchange(b, 3, "GET /api/garbage HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_non_null(strstr(ans, "502 Bad Gateway"));
    assert_non_null(strstr(ans, "upstream_failed"));
    free(ans);
    /* Silent: 504 at the time limit. */
    ans = exchange(b, 5, "GET /api/slow HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_non_null(strstr(ans, "504 Gateway Timeout"));
    free(ans);
    /* Reset mid-body: the head went out, the body ends short; the stream is closed. */
    ans = exchange(b, 7, "GET /api/reset HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_non_null(strstr(ans, "HTTP/1.1 200 OK"));
    free(ans);
    /* A chunked upload that does not parse is refused before anything goes upstream. */
    int served = atomic_load(&up_served);
    ans = exchange(b, 9, "POST /api/echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n");
    assert_non_null(strstr(ans, "400 Bad Request"));
    assert_non_null(strstr(ans, "malformed chunked body"));
    free(ans);
    assert_int_equal(atomic_load(&up_served), served);
    /* Refused before anything goes upstream: each answered, nothing kept of them (the
     * sanitizers' leak check). */
    static const char *const refused[][2] = {
        {"GET /nope/x", "unknown_connection"},
        {"GET /api/a/../../b", "path_not_allowed"},
        {"DELETE /api/x", "method_not_allowed"},
    };
    for (uint32_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        char req[128];
        snprintf(req, sizeof(req), "%s HTTP/1.1\r\nHost: x\r\n\r\n", refused[i][0]);
        ans = exchange(b, 11 + 2 * i, req);
        if (!strstr(ans, refused[i][1]))
            fail_msg("%s: no %s in '%s'", refused[i][0], refused[i][1], ans);
        free(ans);
    }
    assert_int_equal(atomic_load(&up_served), served);
    /* A stream that arrives once the broker is closing is refused, and its descriptor closed:
     * the program sees the end of the stream. */
    eph_broker_close(b);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    assert_int_equal(eph_broker_on_stream(b, 21, sv[1]), -ECANCELED);
    struct pollfd p = {.fd = sv[0], .events = POLLIN};
    assert_int_equal(poll(&p, 1, 10000), 1); /* a bound for a broken test, not a time limit */
    char byte;
    assert_int_equal(read(sv[0], &byte, 1), 0);
    close(sv[0]);
    eph_broker_free(b);
    assert_int_equal(count_fds(), fds);
}

static long vm_size_kib(void)
{
    char line[256];
    long kib = -1;
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmSize: %ld kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

/* 1,000 tiny requests in a row: every one answered, nothing left open. */
static void test_many(void **state)
{
    int fds = count_fds();
    long vm0_kib = vm_size_kib();
    atomic_store(&events, 0);
    struct eph_broker *b = make(true, 5, NULL, 0);
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/ok", up_port);
    char *req = request("GET", url);
    for (uint32_t i = 0; i < 1000; i++) {
        char *ans = exchange(b, 2 * i + 1, req);
        if (!strstr(ans, "\r\n\r\nok"))
            fail_msg("request %u: %s", i, ans);
        free(ans);
    }
    free(req);
    /* Finished streams' threads are joined as new streams come, not kept until the end: an
     * unjoined thread keeps its stack mapped (8 MiB each, 8 GiB for a thousand). */
    free(exchange(b, 2001, "GET /nothing HTTP/1.1\r\n\r\n"));
    long vm_kib = vm_size_kib();
    print_message("VmSize %ld KiB after 1,001 streams (%ld at the start)\n", vm_kib, vm0_kib);
    assert_true(vm_kib - vm0_kib < (1L << 20));
    /* A stream's event follows its answer: count once every stream thread is joined. */
    eph_broker_close(b);
    uint64_t web, conn;
    eph_broker_counts(b, &web, &conn);
    assert_int_equal(web, 1000);
    assert_int_equal(conn, 1);
    eph_broker_free(b);
    assert_int_equal(atomic_load(&events), 1001);
    assert_int_equal(count_fds(), fds);
}

/* close() during a download that stalls ends it at once (cancel, deadline, end of run). */
static void test_close_during_download(void **state)
{
    int fds = count_fds();
    struct eph_broker *b = make(true, 60, NULL, 0);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    assert_int_equal(eph_broker_on_stream(b, 1, sv[1]), 0);
    char req[256];
    snprintf(req, sizeof(req), "GET http://127.0.0.1:%u/stall HTTP/1.1\r\nHost: x\r\n\r\n",
             up_port);
    assert_int_equal(write(sv[0], req, strlen(req)), (ssize_t)strlen(req));
    /* Wait for the first bytes of the answer: the download is under way. */
    char buf[256];
    struct pollfd p = {.fd = sv[0], .events = POLLIN};
    assert_int_equal(poll(&p, 1, 10000), 1);
    assert_true(read(sv[0], buf, sizeof(buf)) > 0);
    uint64_t t0 = eph_clock_mono_ns();
    eph_broker_close(b);
    assert_true(eph_clock_mono_ns() - t0 < 5000000000ull); /* not the 60 s limit */
    /* The program sees its connection end. */
    ssize_t r;
    while ((r = read(sv[0], buf, sizeof(buf))) > 0)
        ;
    assert_true(r == 0 || r < 0);
    close(sv[0]);
    eph_broker_free(b);
    assert_int_equal(count_fds(), fds);
}

static const char *const echo_methods[] = {"GET", "POST"};
static const char *const echo_qn[] = {"key"};
static const char *const echo_qv[] = {SECRET};

/* A connection to the echoing upstream whose credential is a query parameter. */
static struct eph_broker_conn echo_conn(char *base, size_t baselen)
{
    snprintf(base, baselen, "http://127.0.0.1:%u", up_port);
    return (struct eph_broker_conn){.name = "maps",
                                    .base_url = base,
                                    .methods = echo_methods,
                                    .nmethods = 2,
                                    .query_names = echo_qn,
                                    .query_values = echo_qv,
                                    .nquery = 1};
}

/* Chunked uploads are de-chunked, capped and sent with a Content-Length, to a connection and to
 * the web; the query-parameter credential reaches the upstream and comes back redacted. */
static void test_chunked_and_query(void **state)
{
    int fds = count_fds();
    char base[64];
    struct eph_broker_conn c = echo_conn(base, sizeof(base));
    struct eph_broker *b = make(true, 5, &c, 1);
    char *ans =
        exchange(b, 1,
                 "POST /maps/echo?x=1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                 "5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nTrailer: t\r\n\r\n");
    assert_non_null(strstr(ans, "HTTP/1.1 200 OK"));
    assert_non_null(strstr(ans, "line=POST /echo?x=1&key=[REDACTED] HTTP/1.1 body=hello, world"));
    assert_null(strstr(ans, SECRET));
    free(ans);
    /* Split across writes, the same. */
    char url[128], req[512];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/echo", up_port);
    snprintf(
        req, sizeof(req),
        "PUT %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        url);
    ans = exchange(b, 3, req);
    assert_non_null(strstr(ans, "line=PUT /echo HTTP/1.1 body=abc"));
    free(ans);
    eph_broker_free(b);

    /* Over the cap: 413, nothing upstream. */
    struct eph_broker_settings s;
    eph_broker_settings_default(&s);
    assert_int_equal(eph_cidr_parse("127.0.0.1/32", &s.allow_private[0]), 0);
    s.nallow_private = 1;
    s.web_private[0] = s.allow_private[0];
    s.nweb_private = 1;
    s.max_request_bytes = 8;
    s.request_timeout_seconds = 5;
    struct eph_broker_run run = {.web = true, .conns = &c, .nconns = 1, .on_event = on_event};
    assert_int_equal(eph_broker_new(&s, &run, &b), 0);
    int served = atomic_load(&up_served);
    ans = exchange(b, 1,
                   "POST /maps/echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                   "5\r\nhello\r\n5\r\nworld\r\n0\r\n\r\n");
    assert_non_null(strstr(ans, "413 Content Too Large"));
    free(ans);
    assert_int_equal(atomic_load(&up_served), served);
    eph_broker_free(b);
    assert_int_equal(count_fds(), fds);
}

static const char *pair_value(json_t *pairs, const char *name)
{
    size_t i;
    json_t *p;
    json_array_foreach(pairs, i, p)
    {
        if (strcasecmp(json_string_value(json_array_get(p, 0)), name) == 0)
            return json_string_value(json_array_get(p, 1));
    }
    return NULL;
}

static char *b64_decode(const char *s)
{
    size_t n = 0, cap = strlen(s) + 1;
    unsigned char *out = malloc(cap);
    assert_int_equal(
        sodium_base642bin(out, cap, s, strlen(s), NULL, &n, NULL, sodium_base64_VARIANT_ORIGINAL),
        0);
    out[n] = '\0';
    return (char *)out;
}

/* Every exchange is recorded: the request as the broker saw it (a connection's URL without the
 * credential), bodies cut at the cap, the response as the program got it (redacted). */
static void test_record(void **state)
{
    char base[64];
    struct eph_broker_conn c = echo_conn(base, sizeof(base));
    pthread_mutex_lock(&rec_lock);
    recorded = json_array();
    pthread_mutex_unlock(&rec_lock);
    struct eph_broker *b = make_rec(true, 5, &c, 1, true, 12);
    char *ans = exchange(b, 1,
                         "POST /maps/echo?x=1 HTTP/1.1\r\nHost: x\r\nX-Mine: m\r\n"
                         "Proxy-Authorization: Basic cA==\r\nContent-Length: 5\r\n\r\nhello");
    free(ans);
    char req[256];
    snprintf(req, sizeof(req), "CONNECT 127.0.0.1:%u HTTP/1.1\r\n\r\n", up_port);
    ans = exchange(b, 3, req);
    free(ans);
    eph_broker_free(b);
    pthread_mutex_lock(&rec_lock);
    json_t *rec = recorded;
    recorded = NULL;
    pthread_mutex_unlock(&rec_lock);
    assert_int_equal(json_array_size(rec), 2);
    char *all = json_dumps(rec, 0);
    assert_null(strstr(all, SECRET));
    free(all);

    json_t *x = json_array_get(rec, 0), *rq = json_object_get(x, "request"),
           *rs = json_object_get(x, "response");
    assert_string_equal(json_string_value(json_object_get(rq, "method")), "POST");
    assert_string_equal(json_string_value(json_object_get(rq, "url")),
                        "http://127.0.0.1:3128/maps/echo?x=1");
    assert_string_equal(pair_value(json_object_get(rq, "headers"), "X-Mine"), "m");
    assert_null(pair_value(json_object_get(rq, "headers"), "Proxy-Authorization"));
    char *body = b64_decode(json_string_value(json_object_get(rq, "body_base64")));
    assert_string_equal(body, "hello");
    free(body);
    /* sha256("hello") */
    assert_string_equal(json_string_value(json_object_get(rq, "body_sha256")),
                        "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824");
    assert_int_equal(json_integer_value(json_object_get(rs, "status")), 200);
    assert_string_equal(pair_value(json_object_get(rs, "headers"), "X-Up"), "1");
    body = b64_decode(json_string_value(json_object_get(rs, "body_base64")));
    assert_string_equal(body, "line=POST /e"); /* the first 12 bytes */
    free(body);
    assert_true(json_is_true(json_object_get(rs, "truncated")));

    /* A tunnel: its target and status only. */
    x = json_array_get(rec, 1);
    snprintf(req, sizeof(req), "127.0.0.1:%u", up_port);
    assert_string_equal(json_string_value(json_object_get(json_object_get(x, "request"), "url")),
                        req);
    assert_null(json_object_get(json_object_get(x, "request"), "body_base64"));
    assert_int_equal(json_integer_value(json_object_get(json_object_get(x, "response"), "status")),
                     200);
    json_decref(rec);

    /* Zero data retention: no record at all. */
    pthread_mutex_lock(&rec_lock);
    recorded = json_array();
    pthread_mutex_unlock(&rec_lock);
    b = make_rec(true, 5, &c, 1, false, 12);
    free(exchange(b, 1, "GET /maps/echo HTTP/1.1\r\n\r\n"));
    eph_broker_free(b);
    pthread_mutex_lock(&rec_lock);
    assert_int_equal(json_array_size(recorded), 0);
    json_decref(recorded);
    recorded = NULL;
    pthread_mutex_unlock(&rec_lock);
}

/* Replay: answered from the record in order of first match, each recorded exchange once; anything
 * else (another body, a repeat beyond the record, a CONNECT) is 403 not_recorded; and the
 * upstream is never contacted. */
static void test_replay(void **state)
{
    int fds = count_fds();
    char base[64], url[128], get[256];
    struct eph_broker_conn c = echo_conn(base, sizeof(base));
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/echo?n=1", up_port);
    snprintf(get, sizeof(get), "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", url);
    static const char post_a[] = "POST /maps/echo HTTP/1.1\r\nContent-Length: 1\r\n\r\na";
    static const char post_b[] =
        "POST /maps/echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nb\r\n0\r\n\r\n";

    /* The recording: the web GET twice, two POSTs with different bodies. */
    pthread_mutex_lock(&rec_lock);
    recorded = json_array();
    pthread_mutex_unlock(&rec_lock);
    struct eph_broker *b = make_rec(true, 5, &c, 1, true, 1 << 16);
    char *live[4] = {exchange(b, 1, get), exchange(b, 3, post_a), exchange(b, 5, post_b),
                     exchange(b, 7, get)};
    eph_broker_free(b);
    pthread_mutex_lock(&rec_lock);
    json_t *rec = recorded;
    recorded = json_array();
    denials = json_array();
    pthread_mutex_unlock(&rec_lock);
    assert_int_equal(json_array_size(rec), 4);

    int served = atomic_load(&up_served);
    b = make_rec(true, 5, &c, 1, true, 1 << 16);
    assert_int_equal(eph_broker_set_replay(b, rec), 0);
    /* Out of order: each finds its own recording. */
    char *ans = exchange(b, 1, post_b);
    assert_non_null(strstr(ans, "body=b"));
    assert_non_null(strstr(ans, "HTTP/1.1 200 OK"));
    assert_non_null(strstr(ans, "X-Up: 1"));
    assert_null(strstr(ans, SECRET));
    free(ans);
    ans = exchange(b, 3, get);
    /* The same bytes the program got live (the body; the head but its framing). */
    assert_non_null(strstr(ans, "\r\n\r\n"));
    assert_non_null(strstr(live[0], "\r\n\r\n"));
    assert_string_equal(strstr(ans, "\r\n\r\n"), strstr(live[0], "\r\n\r\n"));
    free(ans);
    ans = exchange(b, 5, get);
    assert_non_null(strstr(ans, "HTTP/1.1 200 OK"));
    free(ans);
    /* A third GET was never recorded; nor a POST with another body; nor any tunnel. */
    ans = exchange(b, 7, get);
    assert_non_null(strstr(ans, "403 Forbidden"));
    assert_non_null(strstr(ans, "not_recorded"));
    free(ans);
    ans = exchange(b, 9, "POST /maps/echo HTTP/1.1\r\nContent-Length: 1\r\n\r\nc");
    assert_non_null(strstr(ans, "not_recorded"));
    free(ans);
    char req[256];
    snprintf(req, sizeof(req), "CONNECT 127.0.0.1:%u HTTP/1.1\r\n\r\n", up_port);
    ans = exchange(b, 11, req);
    assert_non_null(strstr(ans, "403 Forbidden"));
    assert_non_null(strstr(ans, "not_recorded"));
    free(ans);
    ans = exchange(b, 13, post_a);
    assert_non_null(strstr(ans, "body=a"));
    free(ans);
    /* web_fetch too answers from the record only. */
    struct eph_web_fetch f;
    char err[256];
    assert_int_equal(eph_broker_web_fetch(b, url, 4096, &f, err, sizeof(err)), -EACCES);
    assert_non_null(strstr(err, "not in the recording"));
    eph_broker_free(b);
    assert_int_equal(atomic_load(&up_served), served);

    pthread_mutex_lock(&rec_lock);
    char *d = json_dumps(denials, JSON_COMPACT);
    assert_string_equal(d, "[null,null,null,\"not_recorded\",\"not_recorded\",\"not_recorded\","
                           "null,\"not_recorded\"]");
    free(d);
    json_decref(denials);
    denials = NULL;
    json_decref(recorded);
    recorded = NULL;
    pthread_mutex_unlock(&rec_lock);
    json_decref(rec);
    for (int i = 0; i < 4; i++)
        free(live[i]);
    json_t *not_array = json_object();
    assert_int_equal(eph_broker_set_replay(b = make(true, 5, NULL, 0), not_array), -EINVAL);
    json_decref(not_array);
    eph_broker_free(b);
    assert_int_equal(count_fds(), fds);
}

int main(void)
{
    /* As the daemon runs the broker (serve.c): a peer gone is a write's error, not a signal. */
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_faults_web),
        cmocka_unit_test(test_faults_connection),
        cmocka_unit_test(test_chunked_and_query),
        cmocka_unit_test(test_record),
        cmocka_unit_test(test_replay),
        cmocka_unit_test(test_many),
        cmocka_unit_test(test_close_during_download),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
