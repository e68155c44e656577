/* The broker's stream server against faulty upstreams, without a sandbox: each test hands the
 * broker one end of a socket pair (as the tunnel does) and plays the program on the other. A
 * loopback upstream in this process misbehaves on purpose: slow, reset mid-body, garbage, and
 * 1,000 tiny requests in a row; close() during a stalled download returns at once. Every case ends
 * with a clear answer or a closed stream, never a stuck thread, and no descriptor is left open
 * (run under ASan by `make SANITIZE=address,undefined`, no leak either). */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
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

#include "broker/broker.h"
#include "common/clock.h"

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
static void on_event(void *arg, const struct eph_broker_event *ev)
{
    atomic_fetch_add(&events, 1);
}

static struct eph_broker *make(bool web, unsigned timeout_s, const struct eph_broker_conn *conns,
                               size_t nconns)
{
    struct eph_broker_settings s;
    eph_broker_settings_default(&s);
    assert_int_equal(eph_cidr_parse("127.0.0.1/32", &s.allow_private[0]), 0);
    s.nallow_private = 1;
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
    /* A chunked upload is refused before anything goes upstream. */
    ans = exchange(b, 9, "POST /api/ok HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
    assert_non_null(strstr(ans, "411 Length Required"));
    assert_non_null(strstr(ans, "length_required"));
    free(ans);
    eph_broker_free(b);
    assert_int_equal(count_fds(), fds);
}

/* 1,000 tiny requests in a row: every one answered, nothing left open. */
static void test_many(void **state)
{
    int fds = count_fds();
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
    /* A stream's event follows its answer: count once every stream thread is joined. */
    eph_broker_close(b);
    uint64_t web, conn;
    eph_broker_counts(b, &web, &conn);
    assert_int_equal(web, 1000);
    eph_broker_free(b);
    assert_int_equal(atomic_load(&events), 1000);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_faults_web),
        cmocka_unit_test(test_faults_connection),
        cmocka_unit_test(test_many),
        cmocka_unit_test(test_close_during_download),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
