/* Where the broker may connect (docs/BROKER.md): the server's own sockets refused whatever the
 * allow-lists open, matched by address and port (a local one at every local address), learnt
 * from the listen address and the database URL. No connection is made. */
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

#include "broker/guard.h"
#include "broker/http.h"
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
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_own_sockets),    cmocka_unit_test(test_own_unspecified),
        cmocka_unit_test(test_own_add_errors), cmocka_unit_test(test_resolve_own),
        cmocka_unit_test(test_store_servers),  cmocka_unit_test(test_learn_own),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
