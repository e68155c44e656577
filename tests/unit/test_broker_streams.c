/* The broker's streams are bounded however the sandbox opens and resets them (docs/BROKER.md,
 * "Caps and faults"): the test plays the tunnel, handing the broker one end of a socket pair per
 * stream and resetting a stream as the tunnel does, by closing its own end. The upstream is a
 * child process (so that its sockets are not counted here) that takes every request and never
 * answers, and tells the test through a pipe each time a request reached it.
 *
 * - A flood of 300 open-request-reset cycles (connection requests through libcurl, CONNECT tunnels
 *   and plain-HTTP web requests in turn) keeps this process within the tunnel cap of stream
 *   threads (/proc/self/task) and of their descriptors (/proc/self/fd) above a baseline measured
 *   before it; every cycle is served, because a reset stream's thread ends at once instead of at
 *   the 60 s request deadline; after the flood everything returns to the baseline, and another
 *   broker starts and serves.
 * - A stream over the cap of live stream threads is answered 503 too_many_tunnels with an event;
 *   once a held stream is reset, a new one is served again. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "broker/broker.h"
#include "common/clock.h"

#define CAP 16
#define CYCLES 300
/* What one stream thread may hold: the program's end of the pair, its upstream socket, and the
 * two wake-up sockets of its libcurl handle. */
#define FDS_PER_STREAM 4
/* Bounds for a broken broker, never met by a working one (they are not time limits). */
#define WAIT_MS 20000
#define RETRY_NS 30000000000ull

static pid_t up_pid = -1;
static unsigned up_port;
static int reached_rd = -1; /* one byte per request that reached the upstream */

/* The upstream: takes connections, reads each request head, answers /fast with "ok" and keeps
 * every other connection open without a word (reading and dropping what comes) until its peer
 * closes it. */
static void upstream_main(int lfd, int reached_wr)
{
    enum { MAXC = 1024 };
    static struct pollfd p[MAXC + 1];
    static char head[MAXC + 1][1024];
    static size_t have[MAXC + 1];
    static int held[MAXC + 1];
    size_t n = 1;
    p[0] = (struct pollfd){.fd = lfd, .events = POLLIN};
    for (;;) {
        if (poll(p, n, -1) < 0)
            continue;
        if (p[0].revents) {
            int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
            if (c >= 0 && n <= MAXC) {
                p[n] = (struct pollfd){.fd = c, .events = POLLIN};
                have[n] = 0;
                held[n] = 0;
                n++;
            } else if (c >= 0) {
                close(c);
            }
        }
        for (size_t i = 1; i < n; i++) {
            if (!p[i].revents)
                continue;
            char buf[4096];
            ssize_t r = read(p[i].fd, buf, sizeof(buf));
            bool drop = r <= 0;
            if (r > 0 && !held[i]) {
                size_t k = (size_t)r < sizeof(head[i]) - 1 - have[i]
                               ? (size_t)r
                               : sizeof(head[i]) - 1 - have[i];
                memcpy(head[i] + have[i], buf, k);
                have[i] += k;
                head[i][have[i]] = '\0';
                if (strstr(head[i], "\r\n\r\n")) {
                    if (strstr(head[i], " /fast")) {
                        static const char ok[] =
                            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
                        (void)!write(p[i].fd, ok, sizeof(ok) - 1);
                        drop = true;
                    } else {
                        held[i] = 1;
                        if (write(reached_wr, "o", 1) != 1)
                            _exit(0);
                    }
                }
            }
            if (drop) {
                close(p[i].fd);
                n--;
                p[i] = p[n];
                memcpy(head[i], head[n], sizeof(head[i]));
                have[i] = have[n];
                held[i] = held[n];
                i--;
            }
        }
    }
}

static int setup(void **state)
{
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof(sa);
    int pv[2];
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd, 512) ||
        getsockname(lfd, (struct sockaddr *)&sa, &l) || pipe2(pv, O_CLOEXEC))
        return -1;
    up_port = ntohs(sa.sin_port);
    pid_t parent = getpid();
    up_pid = fork();
    if (up_pid < 0)
        return -1;
    if (up_pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(0);
        close(pv[0]);
        upstream_main(lfd, pv[1]);
        _exit(0);
    }
    close(lfd);
    close(pv[1]);
    reached_rd = pv[0];
    return 0;
}

static int teardown(void **state)
{
    if (up_pid > 0) {
        kill(up_pid, SIGKILL);
        waitpid(up_pid, NULL, 0);
    }
    close(reached_rd);
    return 0;
}

static int not_dot(const struct dirent *e)
{
    return e->d_name[0] != '.';
}

/* The entries of a /proc directory (each one a thread or a descriptor). */
static int count_entries(const char *path)
{
    struct dirent **list = NULL;
    int n = scandir(path, &list, not_dot, NULL);
    for (int i = 0; i < n; i++)
        free(list[i]);
    free(list);
    assert_true(n > 0);
    return n;
}

static int count_threads(void)
{
    return count_entries("/proc/self/task");
}

/* Not counting the one the count itself opens. */
static int count_fds(void)
{
    return count_entries("/proc/self/fd") - 1;
}

static pthread_mutex_t ev_lock = PTHREAD_MUTEX_INITIALIZER;
static int ev_busy; /* events denied too_many_tunnels */
static void on_event(void *arg, const struct eph_broker_event *ev)
{
    pthread_mutex_lock(&ev_lock);
    ev_busy += ev->denied && strcmp(ev->denied, "too_many_tunnels") == 0;
    pthread_mutex_unlock(&ev_lock);
}

static const char *const methods[] = {"GET"};
static const char *const hnames[] = {"Authorization"};
static const char *const hvalues[] = {"Bearer k-streams"};

static struct eph_broker *make(unsigned cap)
{
    static char base[64];
    snprintf(base, sizeof(base), "http://127.0.0.1:%u", up_port);
    static struct eph_broker_conn c;
    c = (struct eph_broker_conn){.name = "api",
                                 .base_url = base,
                                 .methods = methods,
                                 .nmethods = 1,
                                 .header_names = hnames,
                                 .header_values = hvalues,
                                 .nheaders = 1};
    struct eph_broker_settings s;
    eph_broker_settings_default(&s);
    assert_int_equal(eph_cidr_parse("127.0.0.1/32", &s.allow_private[0]), 0);
    s.nallow_private = 1;
    /* The web requests of the flood go to the same loopback upstream (docs/BROKER.md: web has
     * its own private ranges). */
    s.web_private[0] = s.allow_private[0];
    s.nweb_private = 1;
    s.request_timeout_seconds = 60; /* a thread left behind would stay that long */
    s.max_tunnels_per_run = cap;
    struct eph_broker_run run = {.web = true, .conns = &c, .nconns = 1, .on_event = on_event};
    struct eph_broker *b;
    assert_int_equal(eph_broker_new(&s, &run, &b), 0);
    return b;
}

/* The request of cycle i: a connection request (libcurl), a CONNECT tunnel with a request inside,
 * or a plain-HTTP web request (the broker's own relay). */
static void slow_request(unsigned i, char *out, size_t cap)
{
    switch (i % 3) {
    case 0:
        snprintf(out, cap, "GET /api/slow HTTP/1.1\r\nHost: x\r\n\r\n");
        break;
    case 1:
        snprintf(out, cap,
                 "CONNECT 127.0.0.1:%u HTTP/1.1\r\nHost: x\r\n\r\nGET /slow HTTP/1.1\r\n\r\n",
                 up_port);
        break;
    default:
        snprintf(out, cap, "GET http://127.0.0.1:%u/slow HTTP/1.1\r\nHost: x\r\n\r\n", up_port);
    }
}

/* Opens a stream and sends req: the program's end once the request reached the upstream, or -1
 * when the broker refused the stream (503 too_many_tunnels, read from it here). */
static int open_stream(struct eph_broker *b, uint32_t id, const char *req)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    assert_int_equal(eph_broker_on_stream(b, id, sv[1]), 0);
    /* A refused stream may be closed before the request is written: not an error here. */
    (void)!send(sv[0], req, strlen(req), MSG_NOSIGNAL);
    char ans[4096];
    size_t have = 0;
    for (;;) {
        struct pollfd p[2] = {{.fd = reached_rd, .events = POLLIN},
                              {.fd = sv[0], .events = POLLIN}};
        if (poll(p, 2, WAIT_MS) <= 0)
            fail_msg("stream %u: neither an answer nor a request upstream", id);
        if (p[0].revents) {
            char o;
            assert_int_equal(read(reached_rd, &o, 1), 1);
            return sv[0];
        }
        /* A CONNECT's "200 Connection established" comes first: the request follows it. */
        ssize_t r = read(sv[0], ans + have, sizeof(ans) - 1 - have);
        if (r <= 0)
            fail_msg("stream %u: closed without an answer", id);
        have += (size_t)r;
        ans[have] = '\0';
        if (strstr(ans, "\r\n\r\n") && strncmp(ans, "HTTP/1.1 200", 12) != 0) {
            if (!strstr(ans, "503 Service Unavailable") || !strstr(ans, "too_many_tunnels"))
                fail_msg("stream %u: unexpected answer '%s'", id, ans);
            close(sv[0]);
            return -1;
        }
    }
}

/* One request to /fast through a new stream: its answer contains "ok". */
static void fast_exchange(struct eph_broker *b, uint32_t id, const char *req)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    assert_int_equal(eph_broker_on_stream(b, id, sv[1]), 0);
    assert_int_equal(write(sv[0], req, strlen(req)), (ssize_t)strlen(req));
    char ans[4096];
    size_t have = 0;
    for (;;) {
        struct pollfd p = {.fd = sv[0], .events = POLLIN};
        if (poll(&p, 1, WAIT_MS) <= 0)
            fail_msg("stream %u: no answer", id);
        ssize_t r = read(sv[0], ans + have, sizeof(ans) - 1 - have);
        if (r <= 0)
            break;
        have += (size_t)r;
    }
    ans[have] = '\0';
    close(sv[0]);
    if (!strstr(ans, "HTTP/1.1 200") || !strstr(ans, "\r\n\r\nok"))
        fail_msg("stream %u: '%s'", id, ans);
}

static void fast_both(struct eph_broker *b, uint32_t *id)
{
    char req[256];
    fast_exchange(b, (*id += 2), "GET /api/fast HTTP/1.1\r\nHost: x\r\n\r\n");
    snprintf(req, sizeof(req), "GET http://127.0.0.1:%u/fast HTTP/1.1\r\nHost: x\r\n\r\n", up_port);
    fast_exchange(b, (*id += 2), req);
}

/* A thread may still be listed in /proc/self/task for a moment after it was joined: waits
 * (bounded) for the count to come back. */
static int threads_back_to(int want)
{
    uint64_t end = eph_clock_mono_ns() + RETRY_NS;
    int n;
    while ((n = count_threads()) > want && eph_clock_mono_ns() < end)
        (void)poll(NULL, 0, 1);
    return n;
}

static void test_reset_flood(void **state)
{
    struct eph_broker *b = make(CAP);
    uint32_t id = 1;
    /* Whatever libcurl and the resolver set up once is there before the baseline. */
    fast_both(b, &id);
    int threads0 = threads_back_to(1), fds0 = count_fds();
    print_message("baseline: %d threads, %d descriptors\n", threads0, fds0);

    /* Half the cap held open at a time, the oldest reset as each new one opens. */
    enum { WINDOW = CAP / 2 };
    int held[WINDOW];
    size_t nheld = 0, first = 0;
    int max_threads = 0, max_fds = 0, refused = 0;
    for (unsigned i = 0; i < CYCLES; i++) {
        if (nheld == WINDOW) {
            close(held[first]); /* the reset: what the tunnel does when the sandbox resets */
            first = (first + 1) % WINDOW;
            nheld--;
        }
        char req[256];
        slow_request(i, req, sizeof(req));
        uint64_t end = eph_clock_mono_ns() + RETRY_NS;
        int fd;
        /* Refused while earlier reset streams' threads still end: tried again (bounded). */
        while ((fd = open_stream(b, (id += 2), req)) < 0) {
            refused++;
            if (eph_clock_mono_ns() > end)
                fail_msg("cycle %u: refused for 30 s: the reset streams' threads do not end", i);
            (void)poll(NULL, 0, 1);
        }
        held[(first + nheld) % WINDOW] = fd;
        nheld++;
        int t = count_threads(), f = count_fds();
        max_threads = t > max_threads ? t : max_threads;
        max_fds = f > max_fds ? f : max_fds;
        if (t > threads0 + CAP)
            fail_msg("cycle %u: %d threads, more than %d + the cap of %d", i, t, threads0, CAP);
        if (f > fds0 + (int)nheld + CAP * FDS_PER_STREAM)
            fail_msg("cycle %u: %d descriptors, more than %d + %zu held + %d per stream", i, f,
                     fds0, nheld, FDS_PER_STREAM);
    }
    print_message("%d cycles: at most %d threads and %d descriptors; %d refusals retried\n", CYCLES,
                  max_threads, max_fds, refused);
    for (size_t k = 0; k < nheld; k++)
        close(held[(first + k) % WINDOW]);
    /* The same broker still serves, both ways. */
    fast_both(b, &id);
    eph_broker_free(b);
    assert_int_equal(threads_back_to(threads0), threads0);
    assert_int_equal(count_fds(), fds0);

    /* Another run's broker starts and serves. */
    b = make(CAP);
    id = 1;
    fast_both(b, &id);
    eph_broker_free(b);
    assert_int_equal(threads_back_to(threads0), threads0);
    assert_int_equal(count_fds(), fds0);
}

static void test_over_the_cap(void **state)
{
    struct eph_broker *b = make(2);
    uint32_t id = 1;
    char req[256];
    pthread_mutex_lock(&ev_lock);
    ev_busy = 0;
    pthread_mutex_unlock(&ev_lock);
    slow_request(0, req, sizeof(req));
    int a = open_stream(b, (id += 2), req);
    slow_request(2, req, sizeof(req));
    int c = open_stream(b, (id += 2), req);
    assert_true(a >= 0 && c >= 0);
    /* Two threads serve: the third stream is answered at once, with an event. */
    slow_request(1, req, sizeof(req));
    assert_int_equal(open_stream(b, (id += 2), req), -1);
    pthread_mutex_lock(&ev_lock);
    assert_int_equal(ev_busy, 1);
    pthread_mutex_unlock(&ev_lock);
    /* One reset: its thread ends, and a new stream is served (tried until then, bounded). */
    close(a);
    uint64_t end = eph_clock_mono_ns() + RETRY_NS;
    while ((a = open_stream(b, (id += 2), req)) < 0 && eph_clock_mono_ns() < end)
        (void)poll(NULL, 0, 1);
    assert_true(a >= 0);
    close(a);
    close(c);
    eph_broker_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_over_the_cap),
        cmocka_unit_test(test_reset_flood),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
