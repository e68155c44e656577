/* The SSRF guard (docs/BROKER.md): every spelling of a host, every special-purpose range, the
 * operator's allow-list. No connection is made: this is the classifier alone. */
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "broker/addr.h"

/* The class of a literal, which must parse. */
static enum eph_addr_class cls_of(const char *s)
{
    struct eph_addr a;
    if (eph_addr_parse(s, &a) != 0)
        fail_msg("'%s' does not parse", s);
    return eph_addr_classify(&a);
}

#define CLS(s, want)                                                                               \
    do {                                                                                           \
        enum eph_addr_class got_ = cls_of(s);                                                      \
        if (got_ != (want))                                                                        \
            fail_msg("'%s' is %s, not %s", s, eph_addr_class_name(got_),                           \
                     eph_addr_class_name(want));                                                   \
    } while (0)

/* Each IPv4 special range: its first and last address are in it; the addresses just outside are
 * public (or the neighbouring range). */
static void test_v4_ranges(void **state)
{
    CLS("0.0.0.0", EPH_ADDR_UNSPECIFIED);
    CLS("0.0.0.1", EPH_ADDR_RESERVED);
    CLS("0.255.255.255", EPH_ADDR_RESERVED);
    CLS("1.0.0.0", EPH_ADDR_PUBLIC);
    CLS("9.255.255.255", EPH_ADDR_PUBLIC);
    CLS("10.0.0.0", EPH_ADDR_PRIVATE);
    CLS("10.255.255.255", EPH_ADDR_PRIVATE);
    CLS("11.0.0.0", EPH_ADDR_PUBLIC);
    CLS("100.63.255.255", EPH_ADDR_PUBLIC);
    CLS("100.64.0.0", EPH_ADDR_SHARED);
    CLS("100.127.255.255", EPH_ADDR_SHARED);
    CLS("100.128.0.0", EPH_ADDR_PUBLIC);
    CLS("126.255.255.255", EPH_ADDR_PUBLIC);
    CLS("127.0.0.0", EPH_ADDR_LOOPBACK);
    CLS("127.0.0.1", EPH_ADDR_LOOPBACK);
    CLS("127.255.255.255", EPH_ADDR_LOOPBACK);
    CLS("128.0.0.0", EPH_ADDR_PUBLIC);
    CLS("169.253.255.255", EPH_ADDR_PUBLIC);
    CLS("169.254.0.0", EPH_ADDR_LINK_LOCAL);
    CLS("169.254.169.254", EPH_ADDR_LINK_LOCAL); /* cloud metadata */
    CLS("169.254.255.255", EPH_ADDR_LINK_LOCAL);
    CLS("169.255.0.0", EPH_ADDR_PUBLIC);
    CLS("172.15.255.255", EPH_ADDR_PUBLIC);
    CLS("172.16.0.0", EPH_ADDR_PRIVATE);
    CLS("172.31.255.255", EPH_ADDR_PRIVATE);
    CLS("172.32.0.0", EPH_ADDR_PUBLIC);
    CLS("191.255.255.255", EPH_ADDR_PUBLIC);
    CLS("192.0.0.0", EPH_ADDR_RESERVED);
    CLS("192.0.0.255", EPH_ADDR_RESERVED);
    CLS("192.0.1.0", EPH_ADDR_PUBLIC);
    CLS("192.0.2.0", EPH_ADDR_DOCUMENTATION);
    CLS("192.0.2.255", EPH_ADDR_DOCUMENTATION);
    CLS("192.0.3.0", EPH_ADDR_PUBLIC);
    CLS("192.88.98.255", EPH_ADDR_PUBLIC);
    CLS("192.88.99.0", EPH_ADDR_RESERVED);
    CLS("192.88.99.255", EPH_ADDR_RESERVED);
    CLS("192.88.100.0", EPH_ADDR_PUBLIC);
    CLS("192.167.255.255", EPH_ADDR_PUBLIC);
    CLS("192.168.0.0", EPH_ADDR_PRIVATE);
    CLS("192.168.255.255", EPH_ADDR_PRIVATE);
    CLS("192.169.0.0", EPH_ADDR_PUBLIC);
    CLS("198.17.255.255", EPH_ADDR_PUBLIC);
    CLS("198.18.0.0", EPH_ADDR_RESERVED);
    CLS("198.19.255.255", EPH_ADDR_RESERVED);
    CLS("198.20.0.0", EPH_ADDR_PUBLIC);
    CLS("198.51.99.255", EPH_ADDR_PUBLIC);
    CLS("198.51.100.0", EPH_ADDR_DOCUMENTATION);
    CLS("198.51.100.255", EPH_ADDR_DOCUMENTATION);
    CLS("198.51.101.0", EPH_ADDR_PUBLIC);
    CLS("203.0.112.255", EPH_ADDR_PUBLIC);
    CLS("203.0.113.0", EPH_ADDR_DOCUMENTATION);
    CLS("203.0.113.255", EPH_ADDR_DOCUMENTATION);
    CLS("203.0.114.0", EPH_ADDR_PUBLIC);
    CLS("223.255.255.255", EPH_ADDR_PUBLIC);
    CLS("224.0.0.0", EPH_ADDR_MULTICAST);
    CLS("239.255.255.255", EPH_ADDR_MULTICAST);
    CLS("240.0.0.0", EPH_ADDR_RESERVED);
    CLS("255.255.255.254", EPH_ADDR_RESERVED);
    CLS("255.255.255.255", EPH_ADDR_BROADCAST);
    CLS("8.8.8.8", EPH_ADDR_PUBLIC);
    CLS("93.184.215.14", EPH_ADDR_PUBLIC);
}

static void test_v6_ranges(void **state)
{
    CLS("::", EPH_ADDR_UNSPECIFIED);
    CLS("::1", EPH_ADDR_LOOPBACK);
    CLS("::2", EPH_ADDR_RESERVED);
    /* IPv4-compatible (deprecated): reserved whatever is inside. */
    CLS("::127.0.0.2", EPH_ADDR_RESERVED);
    CLS("::8.8.8.8", EPH_ADDR_RESERVED);
    /* IPv4-mapped: the class of the IPv4 address. */
    CLS("::ffff:127.0.0.2", EPH_ADDR_LOOPBACK);
    CLS("::ffff:7f00:2", EPH_ADDR_LOOPBACK);
    CLS("::ffff:10.1.2.3", EPH_ADDR_PRIVATE);
    CLS("::ffff:169.254.169.254", EPH_ADDR_LINK_LOCAL);
    CLS("::ffff:0.0.0.0", EPH_ADDR_UNSPECIFIED);
    CLS("::ffff:8.8.8.8", EPH_ADDR_PUBLIC);
    CLS("0:0:0:0:0:ffff:7f00:1", EPH_ADDR_LOOPBACK);
    /* IPv4-translated (RFC 2765). */
    CLS("::ffff:0:8.8.8.8", EPH_ADDR_RESERVED);
    /* NAT64 well-known prefix: the class of the IPv4 address; the local-use prefix: reserved. */
    CLS("64:ff9b::127.0.0.2", EPH_ADDR_LOOPBACK);
    CLS("64:ff9b::a00:1", EPH_ADDR_PRIVATE);
    CLS("64:ff9b::8.8.8.8", EPH_ADDR_PUBLIC);
    CLS("64:ff9b:1::8.8.8.8", EPH_ADDR_RESERVED);
    CLS("64:ff9b:1:ffff::", EPH_ADDR_RESERVED);
    /* Discard-only. */
    CLS("100::", EPH_ADDR_RESERVED);
    CLS("100::ffff:ffff:ffff:ffff", EPH_ADDR_RESERVED);
    /* 2001::/23 (Teredo and friends), documentation. */
    CLS("2001::1", EPH_ADDR_RESERVED);
    CLS("2001:0:4136:e378:8000:63bf:3fff:fdd2", EPH_ADDR_RESERVED);
    CLS("2001:1ff:ffff::", EPH_ADDR_RESERVED);
    CLS("2001:200::1", EPH_ADDR_PUBLIC);
    CLS("2001:db8::1", EPH_ADDR_DOCUMENTATION);
    CLS("2001:db8:ffff::1", EPH_ADDR_DOCUMENTATION);
    CLS("2001:db9::1", EPH_ADDR_PUBLIC);
    CLS("3fff::1", EPH_ADDR_DOCUMENTATION);
    CLS("3fff:fff::1", EPH_ADDR_DOCUMENTATION);
    CLS("3fff:1000::1", EPH_ADDR_PUBLIC);
    /* 6to4: the class of the IPv4 address inside. */
    CLS("2002:7f00:2::1", EPH_ADDR_LOOPBACK);
    CLS("2002:a9fe:a9fe::", EPH_ADDR_LINK_LOCAL);
    CLS("2002:808:808::1", EPH_ADDR_PUBLIC);
    /* Unique local, site-local, link-local, multicast. */
    CLS("fc00::", EPH_ADDR_PRIVATE);
    CLS("fd12:3456::1", EPH_ADDR_PRIVATE);
    CLS("fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", EPH_ADDR_PRIVATE);
    CLS("fe80::1", EPH_ADDR_LINK_LOCAL);
    CLS("febf:ffff::1", EPH_ADDR_LINK_LOCAL);
    CLS("fec0::1", EPH_ADDR_PRIVATE);
    CLS("feff::1", EPH_ADDR_PRIVATE);
    CLS("ff02::1", EPH_ADDR_MULTICAST);
    CLS("ff00::", EPH_ADDR_MULTICAST);
    /* Outside 2000::/3 is unallocated; SRv6 SIDs are reserved. */
    CLS("1fff:ffff::1", EPH_ADDR_RESERVED);
    CLS("4000::1", EPH_ADDR_RESERVED);
    CLS("e000::1", EPH_ADDR_RESERVED);
    CLS("5f00::1", EPH_ADDR_RESERVED);
    /* Global unicast. */
    CLS("2000::1", EPH_ADDR_PUBLIC);
    CLS("2606:4700:4700::1111", EPH_ADDR_PUBLIC);
    CLS("3ffe:ffff::1", EPH_ADDR_PUBLIC);
}

/* Every spelling of 127.0.0.2 is 127.0.0.2: decimal, octal, hex, short forms, trailing dot. */
static void test_v4_spellings(void **state)
{
    static const char *forms[] = {
        "127.0.0.2",    "2130706434", "0x7f000002",    "0X7F000002",
        "017700000002", "0177.0.0.2", "0x7f.0.0.2",    "0x7f.0x0.0x0.0x2",
        "127.0.2",      "127.2",      "0177.0.0x0.02", "127.0.0.2.",
        "2130706434.",  "0x7f.2",     "127.0.0.02",    "0000177.0.0.2",
    };
    for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
        struct eph_host h;
        if (eph_host_parse(forms[i], strlen(forms[i]), &h) != 0)
            fail_msg("'%s' does not parse", forms[i]);
        assert_true(h.literal);
        assert_int_equal(h.addr.family, AF_INET);
        if (strcmp(h.name, "127.0.0.2") != 0)
            fail_msg("'%s' is %s", forms[i], h.name);
        assert_int_equal(eph_addr_classify(&h.addr), EPH_ADDR_LOOPBACK);
    }
    /* The same spellings of a public address stay public. */
    struct eph_addr a;
    assert_int_equal(eph_addr_parse("134744072", &a), 0); /* 8.8.8.8 */
    assert_int_equal(eph_addr_classify(&a), EPH_ADDR_PUBLIC);
    assert_int_equal(eph_addr_parse("0", &a), 0);
    assert_int_equal(eph_addr_classify(&a), EPH_ADDR_UNSPECIFIED);
    assert_int_equal(eph_addr_parse("0x", &a), 0); /* as browsers read it: 0.0.0.0 */
    assert_int_equal(eph_addr_classify(&a), EPH_ADDR_UNSPECIFIED);
    assert_int_equal(eph_addr_parse("10.1", &a), 0); /* 10.0.0.1 */
    assert_int_equal(eph_addr_classify(&a), EPH_ADDR_PRIVATE);
    assert_int_equal(eph_addr_parse("169.254.43518", &a), 0); /* 169.254.169.254 */
    assert_int_equal(eph_addr_classify(&a), EPH_ADDR_LINK_LOCAL);
    assert_int_equal(eph_addr_parse("0xa9.0376.0xa9fe", &a), 0);
    assert_int_equal(eph_addr_classify(&a), EPH_ADDR_LINK_LOCAL);
    assert_int_equal(eph_addr_parse("4294967295", &a), 0);
    assert_int_equal(eph_addr_classify(&a), EPH_ADDR_BROADCAST);
}

/* Numeric-looking hosts that are no address: refused, never handed to a resolver. */
static void test_v4_invalid(void **state)
{
    static const char *bad[] = {
        "256.0.0.1",     "1.2.3.256",
        "1.2.3.4.5",     "1..2.3",
        "4294967296",    "0x100000000",
        "08.0.0.1",      "0189",
        "1.2.65536",     "1.16777216",
        "0xg.1",         ".1.2.3",
        "1.2.3.4..",     "99999999999999999999",
        "0x1.0x100.1.1", "127.0.0.1 foo",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct eph_host h;
        if (eph_host_parse(bad[i], strlen(bad[i]), &h) != -EINVAL)
            fail_msg("'%s' was accepted as %s", bad[i], h.name);
    }
}

static void test_v6_spellings(void **state)
{
    struct eph_host h;
    const char *s = "0:0:0:0:0:FFFF:127.0.0.2";
    assert_int_equal(eph_host_parse(s, strlen(s), &h), 0);
    assert_true(h.literal);
    assert_string_equal(h.name, "::ffff:127.0.0.2");
    s = "0000:0000::0001";
    assert_int_equal(eph_host_parse(s, strlen(s), &h), 0);
    assert_string_equal(h.name, "::1");
    /* Zone ids, brackets left on, garbage: refused. */
    static const char *bad[] = {"fe80::1%eth0",      "fe80::1%25eth0",     "[::1]", "::1::", ":::",
                                "1:2:3:4:5:6:7:8:9", "::ffff:127.0.0.0x2", "::1.",  "gggg::"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (eph_host_parse(bad[i], strlen(bad[i]), &h) != -EINVAL)
            fail_msg("'%s' was accepted", bad[i]);
}

static void test_names(void **state)
{
    struct eph_host h;
    const char *s = "Example.COM.";
    assert_int_equal(eph_host_parse(s, strlen(s), &h), 0);
    assert_false(h.literal);
    assert_string_equal(h.name, "example.com");
    s = "localhost.";
    assert_int_equal(eph_host_parse(s, strlen(s), &h), 0);
    assert_string_equal(h.name, "localhost");
    s = "a-b_c.example.org";
    assert_int_equal(eph_host_parse(s, strlen(s), &h), 0);
    /* A name whose last label is not a number is a name, even with digits elsewhere. */
    s = "1.2.3.example";
    assert_int_equal(eph_host_parse(s, strlen(s), &h), 0);
    assert_false(h.literal);
    s = "0x7f000002x";
    assert_int_equal(eph_host_parse(s, strlen(s), &h), 0);
    assert_false(h.literal);
    /* Only the given length is read. */
    assert_int_equal(eph_host_parse("example.com:443", 11, &h), 0);
    assert_string_equal(h.name, "example.com");

    char long_label[80];
    memset(long_label, 'a', 64);
    long_label[64] = '\0';
    char long_name[300];
    memset(long_name, 'a', 260);
    for (int i = 10; i < 260; i += 10)
        long_name[i] = '.';
    long_name[260] = '\0';
    const char *bad[] = {"",         ".",     "..",           "a..b", ".a",    "exa mple.com",
                         "ex/ample", "a@b",   "ex%61mple",    "a\\b", "é.com", long_label,
                         long_name,  "a.b..", "example.com\r"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (eph_host_parse(bad[i], strlen(bad[i]), &h) != -EINVAL)
            fail_msg("'%s' was accepted", bad[i]);
    assert_int_equal(eph_host_parse("a\0b", 3, &h), -EINVAL);
}

static void test_cidr(void **state)
{
    struct eph_cidr c;
    struct eph_addr a;
    assert_int_equal(eph_cidr_parse("127.0.0.1/32", &c), 0);
    assert_int_equal(eph_addr_parse("127.0.0.1", &a), 0);
    assert_true(eph_cidr_contains(&c, &a));
    assert_int_equal(eph_addr_parse("127.0.0.2", &a), 0);
    assert_false(eph_cidr_contains(&c, &a));

    assert_int_equal(eph_cidr_parse("10.0.0.0/8", &c), 0);
    assert_int_equal(eph_addr_parse("10.255.0.1", &a), 0);
    assert_true(eph_cidr_contains(&c, &a));
    assert_int_equal(eph_addr_parse("11.0.0.1", &a), 0);
    assert_false(eph_cidr_contains(&c, &a));

    assert_int_equal(eph_cidr_parse("fd00::/8", &c), 0);
    assert_int_equal(eph_addr_parse("fd12::1", &a), 0);
    assert_true(eph_cidr_contains(&c, &a));
    assert_int_equal(eph_addr_parse("10.0.0.1", &a), 0);
    assert_false(eph_cidr_contains(&c, &a)); /* family mismatch */

    assert_int_equal(eph_cidr_parse("172.16.0.0/12", &c), 0);
    assert_int_equal(eph_addr_parse("172.31.255.255", &a), 0);
    assert_true(eph_cidr_contains(&c, &a));
    assert_int_equal(eph_addr_parse("172.32.0.0", &a), 0);
    assert_false(eph_cidr_contains(&c, &a));

    assert_int_equal(eph_cidr_parse("192.168.1.7", &c), 0);
    assert_int_equal(c.prefix, 32);
    assert_int_equal(eph_cidr_parse("::1", &c), 0);
    assert_int_equal(c.prefix, 128);
    assert_int_equal(eph_cidr_parse("0.0.0.0/0", &c), 0);

    static const char *bad[] = {"",
                                "10.0.0.1/8",
                                "10.0.0.0/33",
                                "10.0.0.0/",
                                "10.0.0.0/-1",
                                "10.0.0.0/08",
                                "0177.0.0.1/32",
                                "2130706433",
                                "::1/129",
                                "fd00::1/8",
                                "10.0.0.0/8x",
                                "10.0.0.0/1234",
                                "x/8"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (eph_cidr_parse(bad[i], &c) != -EINVAL)
            fail_msg("'%s' was accepted", bad[i]);
}

/* The guard: public passes, every loopback form of the tests' refusals is refused without an
 * allow-list, and only exactly what the allow-list names passes with it. */
static void test_check(void **state)
{
    struct eph_addr a;
    enum eph_addr_class cls;
    struct eph_cidr allow[1];
    assert_int_equal(eph_cidr_parse("127.0.0.1/32", &allow[0]), 0);

    assert_int_equal(eph_addr_parse("8.8.8.8", &a), 0);
    assert_int_equal(eph_addr_check(&a, NULL, 0, &cls), 0);
    assert_int_equal(cls, EPH_ADDR_PUBLIC);

    static const char *refused[] = {"127.0.0.2",        "::1",
                                    "::ffff:127.0.0.2", "2130706434",
                                    "0x7f000002",       "127.2",
                                    "0.0.0.0",          "::",
                                    "169.254.169.254",  "::ffff:169.254.169.254",
                                    "64:ff9b::7f00:2",  "2002:7f00:2::",
                                    "fe80::1",          "10.0.0.1"};
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        assert_int_equal(eph_addr_parse(refused[i], &a), 0);
        if (eph_addr_check(&a, allow, 1, &cls) != -EACCES)
            fail_msg("'%s' passed the guard with 127.0.0.1/32 allowed", refused[i]);
        assert_int_not_equal(cls, EPH_ADDR_PUBLIC);
    }
    assert_int_equal(eph_addr_parse("127.0.0.1", &a), 0);
    assert_int_equal(eph_addr_check(&a, NULL, 0, &cls), -EACCES);
    assert_int_equal(cls, EPH_ADDR_LOOPBACK);
    assert_int_equal(eph_addr_check(&a, allow, 1, NULL), 0);
    /* The mapped form of an allowed address is that address. */
    assert_int_equal(eph_addr_parse("::ffff:127.0.0.1", &a), 0);
    assert_int_equal(eph_addr_check(&a, allow, 1, NULL), 0);
    assert_int_equal(eph_addr_check(&a, NULL, 0, NULL), -EACCES);
}

static void test_sockaddr(void **state)
{
    struct sockaddr_in in = {.sin_family = AF_INET};
    struct eph_addr a;
    char txt[EPH_ADDR_STRLEN];
    inet_pton(AF_INET, "127.0.0.2", &in.sin_addr);
    assert_int_equal(eph_addr_from_sockaddr((struct sockaddr *)&in, &a), 0);
    eph_addr_format(&a, txt);
    assert_string_equal(txt, "127.0.0.2");
    struct sockaddr_in6 in6 = {.sin6_family = AF_INET6};
    inet_pton(AF_INET6, "::ffff:10.0.0.1", &in6.sin6_addr);
    assert_int_equal(eph_addr_from_sockaddr((struct sockaddr *)&in6, &a), 0);
    assert_int_equal(eph_addr_classify(&a), EPH_ADDR_PRIVATE);
    struct sockaddr un = {.sa_family = AF_UNIX};
    assert_int_equal(eph_addr_from_sockaddr(&un, &a), -EAFNOSUPPORT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v4_ranges),    cmocka_unit_test(test_v6_ranges),
        cmocka_unit_test(test_v4_spellings), cmocka_unit_test(test_v4_invalid),
        cmocka_unit_test(test_v6_spellings), cmocka_unit_test(test_names),
        cmocka_unit_test(test_cidr),         cmocka_unit_test(test_check),
        cmocka_unit_test(test_sockaddr),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
