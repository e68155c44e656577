/* The broker tunnel end to end in a real namespaces sandbox (docs/BROKER.md): a run without it has
 * no listener and no proxy variables; with it, curl and Python's urllib inside reach the host's
 * stream handler through HTTP_PROXY, a large answer arrives whole through the flow control, and
 * concurrent connections beyond the cap are refused inside. The host side here is a tiny canned
 * HTTP responder standing in for the broker. Skips (and says why) where the namespaces backend or
 * the image is not available. */
#include <errno.h>
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
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <poll.h>

#include <cmocka.h>

#include "sandbox/sandbox.h"

#define BIG_BYTES (6u * 1024u * 1024u + 123u)

static atomic_int streams_seen;
static atomic_int streams_done;
static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;

/* Reads the request head (blocking, bounded), then answers: /big with BIG_BYTES of a pattern,
 * anything else with the request line echoed. */
static void *responder(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char head[8192];
    size_t have = 0;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 20000) <= 0)
            goto out;
        ssize_t r = recv(fd, head + have, sizeof(head) - 1 - have, 0);
        if (r <= 0)
            goto out;
        have += (size_t)r;
        head[have] = '\0';
        if (strstr(head, "\r\n\r\n"))
            break;
        if (have == sizeof(head) - 1)
            goto out;
    }
    char *eol = strstr(head, "\r\n");
    *eol = '\0';
    char buf[65536];
    if (strstr(head, "/big ")) {
        int n = snprintf(buf, sizeof(buf),
                         "HTTP/1.1 200 OK\r\nContent-Length: %u\r\nConnection: close\r\n\r\n",
                         BIG_BYTES);
        size_t left = BIG_BYTES;
        size_t off = 0, len = (size_t)n;
        for (size_t i = (size_t)n; i < sizeof(buf); i++)
            buf[i] = (char)('a' + (i % 26));
        while (left || off < len) {
            if (off == len) {
                size_t take = left < sizeof(buf) - (size_t)n ? left : sizeof(buf) - (size_t)n;
                off = (size_t)n;
                len = (size_t)n + take;
                left -= take;
            }
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            if (poll(&p, 1, 20000) <= 0)
                goto out;
            ssize_t w = send(fd, buf + off, len - off, MSG_NOSIGNAL);
            if (w <= 0)
                goto out;
            off += (size_t)w;
        }
    } else {
        char body[1024];
        int bn = snprintf(body, sizeof(body), "echo: %s\n", head);
        int n = snprintf(buf, sizeof(buf),
                         "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
                         "Connection: close\r\n\r\n%s",
                         bn, body);
        size_t off = 0;
        while (off < (size_t)n) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            if (poll(&p, 1, 20000) <= 0)
                goto out;
            ssize_t w = send(fd, buf + off, (size_t)n - off, MSG_NOSIGNAL);
            if (w <= 0)
                goto out;
            off += (size_t)w;
        }
    }
    pthread_mutex_lock(&done_lock);
    atomic_fetch_add(&streams_done, 1);
    pthread_cond_broadcast(&done_cond);
    pthread_mutex_unlock(&done_lock);
out:
    close(fd);
    return NULL;
}

static int on_stream(void *arg, uint32_t stream, int fd)
{
    pthread_t t;
    atomic_fetch_add(&streams_seen, 1);
    /* The responder blocks: make the socket blocking for it. */
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    if (pthread_create(&t, NULL, responder, (void *)(intptr_t)fd) != 0) {
        close(fd);
        return -EAGAIN;
    }
    pthread_detach(t);
    return 0;
}

static struct eph_sandbox *make_sandbox_on(const char *backend)
{
    const char *build = getenv("BUILD"), *top = getenv("TOP");
    static char init[4096], image[4096];
    char why[256];
    snprintf(init, sizeof(init), "%s/ephemeral-init", build ? build : "build");
    snprintf(image, sizeof(image), "%s/var/images/default", top ? top : ".");
    struct eph_sandbox_config c = {.backend = backend, .image = image, .init_path = init};
    eph_sandbox_limits_default(&c.limits);
    const struct eph_sandbox_ops *ops = eph_sandbox_backend(backend);
    assert_non_null(ops);
    if (access(image, R_OK) != 0 || ops->probe(&c, why, sizeof(why)) != 0) {
        print_message("skipped: the %s backend cannot run here (%s)\n", backend,
                      access(image, R_OK) != 0 ? "no image" : why);
        return NULL;
    }
    struct eph_sandbox *sb = NULL;
    assert_int_equal(ops->create(&c, &sb), 0);
    return sb;
}

static struct eph_sandbox *make_sandbox(void)
{
    return make_sandbox_on("namespaces");
}

static void run(struct eph_sandbox *sb, const char *cmd, struct eph_exec_result *res)
{
    struct eph_exec_request req = {
        .command = cmd, .timeout_ms = 30000, .stdout_cap = 65536, .stderr_cap = 65536};
    eph_exec_result_init(res);
    assert_int_equal(eph_sandbox_exec(sb, &req, res), 0);
}

static void test_no_tunnel_no_listener(void **state)
{
    struct eph_sandbox *sb = make_sandbox();
    if (!sb)
        return;
    struct eph_exec_result res;
    run(sb, "env | grep -ci proxy; curl -sS -m 5 -x http://127.0.0.1:3128 http://example.com/ 2>&1",
        &res);
    /* No proxy variable, and nothing listens: connection refused. */
    assert_non_null(strstr(res.out.data, "0\n"));
    assert_non_null(strstr(res.out.data, "Failed to connect"));
    eph_exec_result_release(&res);
    assert_int_equal(eph_sandbox_destroy(sb), 0);
}

static void test_tunnel(void **state)
{
    struct eph_sandbox *sb = make_sandbox();
    if (!sb)
        return;
    struct eph_sandbox_tunnel t = {
        .port = 3128, .max_streams = 4, .on_stream = on_stream, .arg = NULL};
    assert_non_null(sb->ops->open_tunnel);
    assert_int_equal(sb->ops->open_tunnel(sb, &t), 0);
    assert_int_equal(sb->ops->open_tunnel(sb, &t), -EALREADY);

    struct eph_exec_result res;
    run(sb, "env | grep -i proxy | sort", &res);
    assert_string_equal(res.out.data, "HTTPS_PROXY=http://127.0.0.1:3128\n"
                                      "HTTP_PROXY=http://127.0.0.1:3128\n"
                                      "NO_PROXY=\n"
                                      "http_proxy=http://127.0.0.1:3128\n"
                                      "https_proxy=http://127.0.0.1:3128\n"
                                      "no_proxy=\n");
    eph_exec_result_release(&res);

    /* curl through the environment alone. */
    run(sb, "curl -sS -m 20 http://example.com/hello?x=1", &res);
    assert_int_equal(res.exit_code, 0);
    assert_string_equal(res.out.data, "echo: GET http://example.com/hello?x=1 HTTP/1.1\n");
    eph_exec_result_release(&res);

    /* Python's urllib, also through the environment. */
    run(sb,
        "python3 -c 'import urllib.request as u; "
        "print(u.urlopen(\"http://example.org/py\", timeout=20).read().decode(), end=\"\")'",
        &res);
    assert_int_equal(res.exit_code, 0);
    assert_string_equal(res.out.data, "echo: GET http://example.org/py HTTP/1.1\n");
    eph_exec_result_release(&res);

    /* A large answer, whole and in order, through the per-stream windows. */
    run(sb,
        "curl -sS -m 60 http://example.com/big | python3 -c 'import sys,hashlib; "
        "d=sys.stdin.buffer.read(); print(len(d), d[:3].decode(), d[-1:].decode())'",
        &res);
    assert_int_equal(res.exit_code, 0);
    char want[64];
    /* The body starts where the pattern is after the head, so check length and continuity. */
    snprintf(want, sizeof(want), "%u ", BIG_BYTES);
    assert_memory_equal(res.out.data, want, strlen(want));
    eph_exec_result_release(&res);

    /* Four connections held open reach the cap of four: the fifth is refused inside the
     * sandbox with a 503, and the host never sees it. */
    int before = atomic_load(&streams_seen);
    run(sb,
        "python3 -c '\n"
        "import socket\n"
        "held = [socket.create_connection((\"127.0.0.1\", 3128)) for _ in range(4)]\n"
        "s = socket.create_connection((\"127.0.0.1\", 3128))\n"
        "s.sendall(b\"GET http://example.com/five HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n\")\n"
        "print(s.recv(100).split(b\"\\r\\n\")[0].decode())\n"
        "'",
        &res);
    assert_int_equal(res.exit_code, 0);
    assert_string_equal(res.out.data, "HTTP/1.1 503 Service Unavailable\n");
    eph_exec_result_release(&res);
    assert_int_equal(atomic_load(&streams_seen) - before, 4);

    assert_true(atomic_load(&streams_seen) >= 4);
    assert_int_equal(eph_sandbox_destroy(sb), 0);
}

/* A background process uses the proxy while no command runs: the sandbox's channel thread relays
 * its stream between commands. The host waits for the responder to have answered in full with no
 * call on the sandbox in flight (when streams were relayed only during calls, it never did); a
 * later command then finds what the background process wrote. */
static void background_fetch(const char *backend)
{
    struct eph_sandbox *sb = make_sandbox_on(backend);
    if (!sb)
        return;
    struct eph_sandbox_tunnel t = {
        .port = 3128, .max_streams = 4, .on_stream = on_stream, .arg = NULL};
    assert_int_equal(sb->ops->open_tunnel(sb, &t), 0);
    int before = atomic_load(&streams_done);
    struct eph_exec_result res;
    run(sb,
        "(curl -sS -m 30 http://example.com/background > bg.tmp 2>&1; mv bg.tmp bg.out) "
        "</dev/null >/dev/null 2>&1 &",
        &res);
    assert_int_equal(res.exit_code, 0);
    eph_exec_result_release(&res);

    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 30;
    pthread_mutex_lock(&done_lock);
    int rc = 0;
    while (atomic_load(&streams_done) == before && rc == 0)
        rc = pthread_cond_timedwait(&done_cond, &done_lock, &until);
    int done = atomic_load(&streams_done) - before;
    pthread_mutex_unlock(&done_lock);
    assert_int_equal(done, 1);

    /* The answer reached the program: it wrote it (the loop waits for the rename, bounded). */
    run(sb, "timeout 20 sh -c 'until [ -f bg.out ]; do sleep 0.05; done'; cat bg.out", &res);
    assert_string_equal(res.out.data, "echo: GET http://example.com/background HTTP/1.1\n");
    eph_exec_result_release(&res);
    assert_int_equal(eph_sandbox_destroy(sb), 0);
}

static void test_background_namespaces(void **state)
{
    background_fetch("namespaces");
}

static void test_background_gvisor(void **state)
{
    background_fetch("gvisor");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_tunnel_no_listener),
        cmocka_unit_test(test_tunnel),
        cmocka_unit_test(test_background_namespaces),
        cmocka_unit_test(test_background_gvisor),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
