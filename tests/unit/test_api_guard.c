/* The HTTP server's connection places, reading deadline and failed-key buckets
 * (src/api/guard.c), with the time passed in and the closes recorded instead of made. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "api/guard.h"

/* The descriptors the guard gave up on, in order. */
static int closed[64];
static unsigned nclosed;

static void record_close(int fd, void *ctx)
{
    if (nclosed < 64)
        closed[nclosed++] = fd;
}

static struct sockaddr_storage addr_of(const char *text)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, text, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
    } else {
        assert_int_equal(inet_pton(AF_INET6, text, &in6->sin6_addr), 1);
        in6->sin6_family = AF_INET6;
    }
    return ss;
}

static struct eph_api_guard *guard(unsigned max, unsigned per, unsigned head_ms, unsigned auth)
{
    nclosed = 0;
    struct eph_api_guard_limits lim = {max, per, head_ms, auth};
    struct eph_api_guard *g = NULL;
    assert_int_equal(eph_api_guard_new(&lim, record_close, NULL, &g), 0);
    return g;
}

static struct eph_api_guard_conn *open_from(struct eph_api_guard *g, const char *addr, int fd,
                                            uint64_t now)
{
    struct sockaddr_storage ss = addr_of(addr);
    return eph_api_guard_open(g, (struct sockaddr *)&ss, fd, now);
}

static void test_an_address_gives_up_its_oldest_reading(void **state)
{
    struct eph_api_guard *g = guard(100, 2, 10000, 0);
    struct eph_api_guard_conn *a = open_from(g, "10.0.0.1", 3, 0);
    struct eph_api_guard_conn *b = open_from(g, "10.0.0.1", 4, 1);
    struct eph_api_guard_conn *o = open_from(g, "10.0.0.2", 9, 2);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(nclosed, 0);
    struct eph_api_guard_conn *c = open_from(g, "10.0.0.1", 5, 3);
    assert_non_null(c);
    assert_int_equal(nclosed, 1);
    assert_int_equal(closed[0], 3); /* the oldest of that address, not the other's */
    unsigned open, reading, addresses;
    eph_api_guard_counts(g, &open, &reading, &addresses);
    assert_int_equal(open, 3);
    /* A busy connection keeps its place: b answers, so the next one takes c's. */
    eph_api_guard_busy(g, b);
    assert_non_null(open_from(g, "10.0.0.1", 6, 4));
    assert_int_equal(nclosed, 2);
    assert_int_equal(closed[1], 5);
    /* MHD closes the one given up later: counted once. */
    eph_api_guard_close(g, a);
    eph_api_guard_close(g, c);
    eph_api_guard_counts(g, &open, &reading, &addresses);
    assert_int_equal(open, 3);
    eph_api_guard_close(g, o);
    eph_api_guard_close(g, NULL);
    eph_api_guard_free(g);
}

static void test_every_place_busy_refuses(void **state)
{
    struct eph_api_guard *g = guard(100, 2, 10000, 0);
    struct eph_api_guard_conn *a = open_from(g, "10.0.0.1", 3, 0);
    struct eph_api_guard_conn *b = open_from(g, "10.0.0.1", 4, 0);
    eph_api_guard_busy(g, a);
    eph_api_guard_busy(g, b);
    assert_null(open_from(g, "10.0.0.1", 5, 1));
    assert_int_equal(nclosed, 0);
    /* Answered: b reads its next request, and that place can be taken again. */
    eph_api_guard_idle(g, b, 2);
    assert_non_null(open_from(g, "10.0.0.1", 5, 3));
    assert_int_equal(nclosed, 1);
    assert_int_equal(closed[0], 4);
    eph_api_guard_free(g);
}

static void test_the_server_gives_up_anyones_oldest_reading(void **state)
{
    struct eph_api_guard *g = guard(3, 10, 10000, 0);
    struct eph_api_guard_conn *a = open_from(g, "10.0.0.1", 3, 0);
    open_from(g, "10.0.0.2", 4, 1);
    open_from(g, "10.0.0.3", 5, 2);
    eph_api_guard_busy(g, a);
    assert_non_null(open_from(g, "10.0.0.4", 6, 3));
    assert_int_equal(nclosed, 1);
    assert_int_equal(closed[0], 4); /* the oldest reading; a is busy */
    unsigned open, reading, addresses;
    eph_api_guard_counts(g, &open, &reading, &addresses);
    assert_int_equal(open, 3);
    assert_int_equal(reading, 2);
    eph_api_guard_free(g);
}

static void test_the_reading_deadline(void **state)
{
    struct eph_api_guard *g = guard(100, 10, 1000, 0);
    open_from(g, "10.0.0.1", 3, 0);
    struct eph_api_guard_conn *b = open_from(g, "10.0.0.1", 4, 0);
    eph_api_guard_busy(g, b);
    assert_int_equal(eph_api_guard_expire(g, 999), 1);
    assert_int_equal(nclosed, 0);
    assert_int_equal(eph_api_guard_expire(g, 1000), 1000); /* none reading any more */
    assert_int_equal(nclosed, 1);
    assert_int_equal(closed[0], 3);
    /* A busy connection has no deadline; once answered, its next head has one of its own. */
    assert_int_equal(eph_api_guard_expire(g, 50000), 1000);
    assert_int_equal(nclosed, 1);
    eph_api_guard_idle(g, b, 50000);
    assert_int_equal(eph_api_guard_expire(g, 50400), 600);
    eph_api_guard_expire(g, 51000);
    assert_int_equal(nclosed, 2);
    assert_int_equal(closed[1], 4);
    /* Given up: busy and idle do nothing, the close frees it. */
    eph_api_guard_idle(g, b, 52000);
    eph_api_guard_busy(g, b);
    unsigned open, reading, addresses;
    eph_api_guard_counts(g, &open, &reading, &addresses);
    assert_int_equal(open, 0);
    eph_api_guard_close(g, b);
    eph_api_guard_free(g);
}

static void test_addresses(void **state)
{
    struct eph_api_guard *g = guard(100, 1, 10000, 0);
    /* One IPv6 /64 is one address; another /64 is another; a mapped IPv4 address is itself. */
    open_from(g, "2001:db8:1:2::1", 3, 0);
    open_from(g, "2001:db8:1:2:ffff::9", 4, 1);
    assert_int_equal(nclosed, 1);
    open_from(g, "2001:db8:1:3::1", 5, 2);
    assert_int_equal(nclosed, 1);
    open_from(g, "192.0.2.7", 6, 3);
    open_from(g, "::ffff:192.0.2.7", 7, 4);
    assert_int_equal(nclosed, 2);
    assert_int_equal(closed[1], 6);
    /* No address at all (a socket of another family) is one address of its own. */
    assert_non_null(eph_api_guard_open(g, NULL, 8, 5));
    eph_api_guard_free(g);
}

static void test_failed_keys(void **state)
{
    struct eph_api_guard *g = guard(100, 10, 10000, 3);
    struct sockaddr_storage a = addr_of("10.0.0.1"), b = addr_of("10.0.0.2");
    const struct sockaddr *sa = (const struct sockaddr *)&a, *sb = (const struct sockaddr *)&b;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(eph_api_guard_auth_wait(g, sa, 0), 0);
        eph_api_guard_auth_failed(g, sa, 0);
    }
    /* Empty: one failure refills in 60 s / 3. */
    assert_int_equal(eph_api_guard_auth_wait(g, sa, 0), 20);
    assert_int_equal(eph_api_guard_auth_wait(g, sa, 10000), 10);
    assert_int_equal(eph_api_guard_auth_wait(g, sa, 19999), 1);
    assert_int_equal(eph_api_guard_auth_wait(g, sb, 19999), 0);
    assert_int_equal(eph_api_guard_auth_wait(g, sa, 20000), 0);
    eph_api_guard_auth_failed(g, sa, 20000);
    assert_int_equal(eph_api_guard_auth_wait(g, sa, 20000), 20);
    /* Failures past empty do not dig deeper. */
    eph_api_guard_auth_failed(g, sa, 20000);
    assert_int_equal(eph_api_guard_auth_wait(g, sa, 40000), 0);
    eph_api_guard_free(g);

    g = guard(100, 10, 10000, 0); /* no limit */
    for (int i = 0; i < 100; i++)
        eph_api_guard_auth_failed(g, sa, 0);
    assert_int_equal(eph_api_guard_auth_wait(g, sa, 0), 0);
    eph_api_guard_free(g);
}

static void test_many_failing_addresses_stay_bounded(void **state)
{
    struct eph_api_guard *g = guard(4, 4, 10000, 1);
    char text[32];
    /* Far more addresses than the table keeps: it stays bounded and keeps counting new ones
     * once the old ones have refilled. */
    for (unsigned i = 0; i < 10000; i++) {
        snprintf(text, sizeof(text), "10.%u.%u.%u", i >> 16 & 255, i >> 8 & 255, i & 255);
        struct sockaddr_storage ss = addr_of(text);
        eph_api_guard_auth_failed(g, (struct sockaddr *)&ss, 0);
    }
    unsigned open, reading, addresses;
    eph_api_guard_counts(g, &open, &reading, &addresses);
    assert_int_equal(addresses, 4096);
    struct sockaddr_storage late = addr_of("192.0.2.1");
    eph_api_guard_auth_failed(g, (struct sockaddr *)&late, 120000);
    assert_int_equal(eph_api_guard_auth_wait(g, (struct sockaddr *)&late, 120000), 60);
    eph_api_guard_counts(g, &open, &reading, &addresses);
    assert_int_equal(addresses, 1); /* the refilled ones went to make room */
    eph_api_guard_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_an_address_gives_up_its_oldest_reading),
        cmocka_unit_test(test_every_place_busy_refuses),
        cmocka_unit_test(test_the_server_gives_up_anyones_oldest_reading),
        cmocka_unit_test(test_the_reading_deadline),
        cmocka_unit_test(test_addresses),
        cmocka_unit_test(test_failed_keys),
        cmocka_unit_test(test_many_failing_addresses_stay_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
