/* Where the broker may connect (docs/BROKER.md): the server's own sockets refused whatever the
 * allow-lists open, matched by address and port (a local one at every local address); and what
 * libcurl is handed: the URL in the one spelling the guard checked (trailing dot, case, IDN,
 * every literal spelling), the pin that always matches it, and the socket callback that refuses
 * any other address. The curl cases connect on loopback only (127.0.0.1 and 127.0.0.2). */
#include <arpa/inet.h>
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
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "broker/guard.h"
#include "broker/http.h"
#include "broker/pin.h"
#include "common/buf.h"
#include "run/egress.h"
#include "store/store.h"

static struct eph_addr addr_of(const char *s)
{
    struct eph_addr a;
    if (eph_addr_parse(s, &a) != 0)
        fail_msg("'%s' does not parse", s);
    return a;
}

static void own_add(struct eph_guard_own *o, const char *addr, uint16_t port)
{
    struct eph_addr a = addr_of(addr);
    struct sockaddr_storage ss;
    eph_guard_sockaddr(&a, port, &ss);
    assert_int_equal(eph_guard_own_add(o, (struct sockaddr *)&ss), 0);
}

static int check(const struct eph_guard *g, const char *addr, uint16_t port)
{
    struct eph_addr a = addr_of(addr);
    return eph_guard_check(g, &a, port, NULL);
}

/* The API listens on 127.0.0.1:8080, PostgreSQL on 192.0.2.10:5432 (an address of no host here):
 * with every loopback and that range opened, the sockets themselves stay closed, by address and
 * port. */
static void test_own_sockets(void **state)
{
    struct eph_guard_own own = {0};
    own_add(&own, "127.0.0.1", 8080);
    own_add(&own, "192.0.2.10", 5432);
    assert_true(own.local[0]);
    assert_false(own.local[1]);
    struct eph_cidr allow[4];
    assert_int_equal(eph_cidr_parse("127.0.0.0/8", &allow[0]), 0);
    assert_int_equal(eph_cidr_parse("::1/128", &allow[1]), 0);
    assert_int_equal(eph_cidr_parse("192.0.2.0/24", &allow[2]), 0);
    assert_int_equal(eph_cidr_parse("0.0.0.0/32", &allow[3]), 0);
    struct eph_guard g = {.allow = allow, .nallow = 4, .own = &own};

    assert_int_equal(check(&g, "127.0.0.1", 8080), -EPERM);
    /* Every other spelling of a local address at that port reaches the same listener. */
    assert_int_equal(check(&g, "127.0.0.2", 8080), -EPERM);
    assert_int_equal(check(&g, "::ffff:127.0.0.1", 8080), -EPERM);
    assert_int_equal(check(&g, "::1", 8080), -EPERM);
    assert_int_equal(check(&g, "0.0.0.0", 8080), -EPERM);
    /* Another port of the same address is what the range opened. */
    assert_int_equal(check(&g, "127.0.0.1", 8081), 0);
    assert_int_equal(check(&g, "::1", 8081), 0);
    /* A remote store's server: that address at that port only. */
    assert_int_equal(check(&g, "192.0.2.10", 5432), -EPERM);
    assert_int_equal(check(&g, "::ffff:192.0.2.10", 5432), -EPERM);
    assert_int_equal(check(&g, "192.0.2.11", 5432), 0);
    assert_int_equal(check(&g, "192.0.2.10", 5433), 0);
    /* A public address at the API's port is not this host. */
    assert_int_equal(check(&g, "93.184.215.14", 8080), 0);
    /* Without the ranges, the class refuses first. */
    struct eph_guard closed = {.own = &own};
    enum eph_addr_class cls;
    struct eph_addr a = addr_of("127.0.0.1");
    assert_int_equal(eph_guard_check(&closed, &a, 8081, &cls), -EACCES);
    assert_int_equal(cls, EPH_ADDR_LOOPBACK);
    assert_int_equal(check(&closed, "127.0.0.1", 8080), -EACCES);
    /* No own list: the ranges alone. */
    struct eph_guard bare = {.allow = allow, .nallow = 4};
    assert_int_equal(check(&bare, "127.0.0.1", 8080), 0);
}

/* A listener on the unspecified address is every local address at its port. */
static void test_own_unspecified(void **state)
{
    struct eph_guard_own own = {0};
    own_add(&own, "0.0.0.0", 9090);
    own_add(&own, "::", 9091);
    struct eph_cidr allow[2];
    assert_int_equal(eph_cidr_parse("127.0.0.0/8", &allow[0]), 0);
    assert_int_equal(eph_cidr_parse("::/0", &allow[1]), 0);
    struct eph_guard g = {.allow = allow, .nallow = 2, .own = &own};
    assert_int_equal(check(&g, "127.0.0.5", 9090), -EPERM);
    assert_int_equal(check(&g, "::1", 9090), -EPERM);
    assert_int_equal(check(&g, "127.0.0.5", 9091), -EPERM);
    assert_int_equal(check(&g, "::ffff:127.0.0.9", 9091), -EPERM);
    assert_int_equal(check(&g, "127.0.0.5", 9092), 0);
    /* fd00::/8 is no address of this host: at that port it is someone else's. */
    assert_int_equal(check(&g, "fd00::1234", 9091), 0);
    assert_true(eph_guard_is_local(&(struct eph_addr){.family = AF_INET6}));
    struct eph_addr far = addr_of("192.0.2.77");
    assert_false(eph_guard_is_local(&far));
}

static void test_own_add_errors(void **state)
{
    struct eph_guard_own own = {0};
    struct sockaddr_un un = {.sun_family = AF_UNIX};
    assert_int_equal(eph_guard_own_add(&own, (struct sockaddr *)&un), -EAFNOSUPPORT);
    struct eph_addr a = addr_of("127.0.0.1");
    struct sockaddr_storage ss;
    eph_guard_sockaddr(&a, 0, &ss);
    assert_int_equal(eph_guard_own_add(&own, (struct sockaddr *)&ss), -EINVAL);
    for (unsigned i = 0; i < EPH_GUARD_MAX_OWN; i++)
        own_add(&own, "127.0.0.1", (uint16_t)(1000 + i));
    eph_guard_sockaddr(&a, 2000, &ss);
    assert_int_equal(eph_guard_own_add(&own, (struct sockaddr *)&ss), -ENOSPC);
    assert_int_equal(own.n, EPH_GUARD_MAX_OWN);
    assert_false(eph_guard_own_match(NULL, &a, 1000));
}

/* The resolver's answers pass the same check: "localhost" (from /etc/hosts) at the API's port. */
static void test_resolve_own(void **state)
{
    struct eph_guard_own own = {0};
    own_add(&own, "127.0.0.1", 8080);
    struct eph_cidr allow[2];
    assert_int_equal(eph_cidr_parse("127.0.0.0/8", &allow[0]), 0);
    assert_int_equal(eph_cidr_parse("::1/128", &allow[1]), 0);
    struct eph_guard g = {.allow = allow, .nallow = 2, .own = &own};
    struct eph_host h;
    assert_int_equal(eph_host_parse("LocalHost.", 10, &h), 0);
    struct eph_addr out;
    assert_int_equal(eph_guard_resolve(&g, &h, 8080, &out, NULL), -EPERM);
    assert_int_equal(eph_guard_resolve(&g, &h, 8081, &out, NULL), 0);
    assert_int_equal(eph_host_parse("0x7f.1", 6, &h), 0);
    assert_int_equal(eph_guard_resolve(&g, &h, 8080, &out, NULL), -EPERM);
}

/* What curl is handed for a URL: the spelling the guard checked. */
static void expect_url(const char *in, const char *want)
{
    struct eph_http_url u;
    if (eph_http_parse_url(in, strlen(in), &u) != 0)
        fail_msg("'%s' does not parse", in);
    struct eph_buf b;
    eph_buf_init(&b, 4096);
    assert_int_equal(eph_pin_url(&b, &u), 0);
    if (strcmp(b.data, want) != 0)
        fail_msg("'%s' became '%s', not '%s'", in, b.data, want);
    eph_buf_release(&b);
}

static void test_url_for_curl(void **state)
{
    expect_url("http://rebind.test./", "http://rebind.test/");
    expect_url("HTTP://ReBind.TEST.:80/a/b?x=1#frag", "http://rebind.test/a/b?x=1");
    expect_url("https://EXAMPLE.com.:443", "https://example.com/");
    expect_url("https://example.com:8443/p", "https://example.com:8443/p");
    expect_url("http://example.com:443/", "http://example.com:443/");
    expect_url("http://xn--BCHER-kva.Example./", "http://xn--bcher-kva.example/");
    expect_url("http://0x7f.1:81/p", "http://127.0.0.1:81/p");
    expect_url("http://2130706433/", "http://127.0.0.1/");
    expect_url("http://[::FFFF:127.0.0.1]:8080/", "http://[::ffff:127.0.0.1]:8080/");
    expect_url("http://[0:0:0:0:0:0:0:1]/", "http://[::1]/");
    expect_url("http://h?q", "http://h/?q");
    /* A host in any other spelling never reaches curl, whose IDN conversion or percent-decoding
     * could read it as another name. */
    static const char *const refused[] = {"http://b\xc3\xbc"
                                          "cher.example/",
                                          "http://127\xe3\x80\x82"
                                          "0.0.1/",
                                          "http://%31%32%37.0.0.1/",
                                          "http://user@host/",
                                          "http://host\\@127.0.0.1/",
                                          "http://[::1%25lo]/"};
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        struct eph_http_url u;
        if (eph_http_parse_url(refused[i], strlen(refused[i]), &u) != -EINVAL)
            fail_msg("'%s' was accepted", refused[i]);
    }
    /* A connection's origin, from its base URL's authority. */
    struct eph_http_authority auth;
    assert_int_equal(eph_http_parse_authority("API.Example.COM.", 16, 443, &auth), 0);
    struct eph_buf b;
    eph_buf_init(&b, 256);
    assert_int_equal(eph_pin_origin(&b, true, &auth), 0);
    assert_string_equal(b.data, "https://api.example.com");
    eph_buf_release(&b);
}

/* Two loopback listeners at the same port: the pinned one (127.0.0.2) and the one a second
 * resolution of "localhost" would reach (127.0.0.1). Each answers one request and counts it. */
struct listeners {
    int fd[2];
    atomic_int served[2];
    atomic_bool stop;
    uint16_t port;
};

static void *serve_both(void *arg)
{
    struct listeners *l = arg;
    while (!atomic_load(&l->stop)) {
        struct pollfd p[2] = {{.fd = l->fd[0], .events = POLLIN},
                              {.fd = l->fd[1], .events = POLLIN}};
        if (poll(p, 2, 50) <= 0)
            continue;
        for (int i = 0; i < 2; i++) {
            if (!(p[i].revents & POLLIN))
                continue;
            int c = accept(l->fd[i], NULL, NULL);
            if (c < 0)
                continue;
            char buf[2048];
            (void)!recv(c, buf, sizeof(buf), 0);
            static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
            (void)!send(c, ok, sizeof(ok) - 1, MSG_NOSIGNAL);
            close(c);
            atomic_fetch_add(&l->served[i], 1);
        }
    }
    return NULL;
}

static int listen_on(const char *ip, uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = htons(*port)};
    inet_pton(AF_INET, ip, &in.sin_addr);
    if (bind(fd, (struct sockaddr *)&in, sizeof(in)) != 0 || listen(fd, 8) != 0) {
        close(fd);
        return -1;
    }
    socklen_t len = sizeof(in);
    getsockname(fd, (struct sockaddr *)&in, &len);
    *port = ntohs(in.sin_port);
    return fd;
}

static size_t discard(char *p, size_t size, size_t n, void *arg)
{
    return size * n;
}

/* One GET of url with the pin of the guard's address, as the broker makes it. */
static CURLcode fetch_pinned(const char *url, const char *pin_addr, bool *refused)
{
    struct eph_http_url u;
    assert_int_equal(eph_http_parse_url(url, strlen(url), &u), 0);
    struct eph_buf b;
    eph_buf_init(&b, 4096);
    assert_int_equal(eph_pin_url(&b, &u), 0);
    struct eph_addr a = addr_of(pin_addr);
    CURL *h = curl_easy_init();
    assert_non_null(h);
    struct eph_pin pin;
    assert_int_equal(eph_pin_apply(&pin, h, &u.auth, &a), 0);
    curl_easy_setopt(h, CURLOPT_URL, b.data);
    curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 10L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
    CURLcode cr = curl_easy_perform(h);
    curl_easy_cleanup(h);
    *refused = pin.refused;
    eph_pin_release(&pin);
    eph_buf_release(&b);
    return cr;
}

static void test_curl_connects_to_the_pin(void **state)
{
    struct listeners l = {.port = 0};
    l.fd[0] = listen_on("127.0.0.2", &l.port);
    if (l.fd[0] < 0)
        skip();
    l.fd[1] = listen_on("127.0.0.1", &l.port);
    if (l.fd[1] < 0) {
        close(l.fd[0]);
        skip();
    }
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, serve_both, &l), 0);
    static const char *const spellings[] = {"localhost", "localhost.", "LOCALHOST.", "LocalHost"};
    for (size_t i = 0; i < sizeof(spellings) / sizeof(spellings[0]); i++) {
        char url[128];
        snprintf(url, sizeof(url), "http://%s:%u/x", spellings[i], l.port);
        bool refused;
        CURLcode cr = fetch_pinned(url, "127.0.0.2", &refused);
        if (cr != CURLE_OK)
            fail_msg("%s: %s", url, curl_easy_strerror(cr));
        assert_false(refused);
        assert_int_equal(atomic_load(&l.served[0]), (int)i + 1);
        assert_int_equal(atomic_load(&l.served[1]), 0);
    }
    /* A literal is its own address; a pin that says otherwise stops curl at the socket. */
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/x", l.port);
    bool refused = false;
    assert_int_equal(fetch_pinned(url, "127.0.0.2", &refused), CURLE_COULDNT_CONNECT);
    assert_true(refused);
    assert_int_equal(atomic_load(&l.served[1]), 0);
    atomic_store(&l.stop, true);
    pthread_join(t, NULL);
    close(l.fd[0]);
    close(l.fd[1]);
}

/* The socket callback alone: the pinned address and port, nothing else. */
static void test_open_socket(void **state)
{
    struct eph_http_authority auth;
    assert_int_equal(eph_http_parse_authority("example.test:8080", 17, 0, &auth), 0);
    struct eph_addr a = addr_of("127.0.0.2");
    CURL *h = curl_easy_init();
    struct eph_pin pin;
    assert_int_equal(eph_pin_apply(&pin, h, &auth, &a), 0);
    union {
        struct curl_sockaddr c;
        unsigned char room[sizeof(struct curl_sockaddr) + sizeof(struct sockaddr_in6)];
    } u;
    struct {
        const char *ip;
        uint16_t port;
        curlsocktype purpose;
        bool ok;
    } cases[] = {{"127.0.0.2", 8080, CURLSOCKTYPE_IPCXN, true},
                 {"127.0.0.1", 8080, CURLSOCKTYPE_IPCXN, false},
                 {"127.0.0.2", 8081, CURLSOCKTYPE_IPCXN, false},
                 {"::ffff:127.0.0.2", 8080, CURLSOCKTYPE_IPCXN, false},
                 {"::1", 8080, CURLSOCKTYPE_IPCXN, false},
                 {"127.0.0.2", 8080, CURLSOCKTYPE_ACCEPT, false}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        memset(&u, 0, sizeof(u));
        struct eph_addr x = addr_of(cases[i].ip);
        struct sockaddr_storage ss;
        socklen_t len = eph_guard_sockaddr(&x, cases[i].port, &ss);
        u.c.family = ss.ss_family;
        u.c.socktype = SOCK_STREAM;
        u.c.protocol = IPPROTO_TCP;
        u.c.addrlen = len;
        memcpy(&u.c.addr, &ss, len);
        pin.refused = false;
        curl_socket_t s = eph_pin_open_socket(&pin, cases[i].purpose, &u.c);
        if (cases[i].ok) {
            assert_true(s != CURL_SOCKET_BAD);
            assert_false(pin.refused);
            close(s);
        } else {
            if (s != CURL_SOCKET_BAD)
                fail_msg("case %zu (%s:%u) got a socket", i, cases[i].ip, cases[i].port);
            assert_true(pin.refused);
        }
    }
    curl_easy_cleanup(h);
    eph_pin_release(&pin);
}

static void expect_servers(const char *target, const char *const *want, size_t nwant)
{
    struct sockaddr_storage ss[8];
    size_t n = eph_store_postgres_servers(target, ss, 8);
    if (n != nwant)
        fail_msg("'%s': %zu servers, not %zu", target, n, nwant);
    for (size_t i = 0; i < n; i++) {
        struct eph_addr a;
        assert_int_equal(eph_addr_from_sockaddr((struct sockaddr *)&ss[i], &a), 0);
        char text[EPH_ADDR_STRLEN + 8], astr[EPH_ADDR_STRLEN];
        eph_addr_format(&a, astr);
        uint16_t port = ss[i].ss_family == AF_INET
                            ? ntohs(((struct sockaddr_in *)&ss[i])->sin_port)
                            : ntohs(((struct sockaddr_in6 *)&ss[i])->sin6_port);
        snprintf(text, sizeof(text), "%s %u", astr, port);
        if (strcmp(text, want[i]) != 0)
            fail_msg("'%s': server %zu is %s, not %s", target, i, text, want[i]);
    }
}

/* The store's servers, from the database URL as libpq reads it. */
static void test_store_servers(void **state)
{
    unsetenv("PGHOST");
    unsetenv("PGPORT");
    expect_servers("postgresql://u@127.0.0.1:5433/db?pool_size=3",
                   (const char *const[]){"127.0.0.1 5433"}, 1);
    expect_servers("postgres://u@127.0.0.1/db", (const char *const[]){"127.0.0.1 5432"}, 1);
    expect_servers("postgresql://u@[::1]:6000,127.0.0.2:6001/db",
                   (const char *const[]){"::1 6000", "127.0.0.2 6001"}, 2);
    expect_servers("postgresql://u@127.0.0.3,127.0.0.4:7000/db",
                   (const char *const[]){"127.0.0.3 5432", "127.0.0.4 7000"}, 2);
    expect_servers("postgresql://u@h/db?hostaddr=127.0.0.5&port=7001",
                   (const char *const[]){"127.0.0.5 7001"}, 1);
    /* A Unix socket, a SQLite path, garbage: no TCP server. */
    expect_servers("postgresql://u@%2Fvar%2Frun%2Fpostgresql/db", NULL, 0);
    expect_servers("postgresql:///db", NULL, 0);
    expect_servers("var/ephemeral.db", NULL, 0);
    expect_servers("postgresql://u@127.0.0.1:99999999/db", NULL, 0);
    setenv("PGPORT", "7002", 1);
    expect_servers("postgresql://u@127.0.0.6/db", (const char *const[]){"127.0.0.6 7002"}, 1);
    unsetenv("PGPORT");
}

/* What the service hands every broker: the API's listen socket and the store's servers. */
static void test_learn_own(void **state)
{
    struct eph_config cfg = {.listen = "0.0.0.0:8080",
                             .db = "postgresql://u@127.0.0.1:5433/db?pool_size=2"};
    struct eph_service svc = {.cfg = &cfg};
    eph_egress_learn_own(&svc);
    assert_int_equal(svc.broker_own.n, 2);
    struct eph_addr a = addr_of("127.0.0.9");
    assert_true(eph_guard_own_match(&svc.broker_own, &a, 8080));
    assert_true(eph_guard_own_match(&svc.broker_own, &a, 5433));
    assert_false(eph_guard_own_match(&svc.broker_own, &a, 8081));
    cfg.listen = "[::1]:9000";
    cfg.db = "var/ephemeral.db";
    eph_egress_learn_own(&svc);
    assert_int_equal(svc.broker_own.n, 1);
    assert_true(eph_guard_own_match(&svc.broker_own, &a, 9000));
    /* A port of 0 is chosen by the kernel later: nothing to refuse, and it says so. */
    cfg.listen = "127.0.0.1:0";
    eph_egress_learn_own(&svc);
    assert_int_equal(svc.broker_own.n, 0);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_own_sockets),    cmocka_unit_test(test_own_unspecified),
        cmocka_unit_test(test_own_add_errors), cmocka_unit_test(test_resolve_own),
        cmocka_unit_test(test_url_for_curl),   cmocka_unit_test(test_curl_connects_to_the_pin),
        cmocka_unit_test(test_open_socket),    cmocka_unit_test(test_store_servers),
        cmocka_unit_test(test_learn_own),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
