/* The broker's parsers of what the sandbox sends (docs/BROKER.md): the request head, the body's
 * framing, CONNECT targets, absolute URIs, and the path normaliser the rules are checked after. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "broker/http.h"

static int parse(const char *s, struct eph_http_request *req)
{
    return eph_http_parse_request(s, strlen(s), req);
}

static void test_request_ok(void **state)
{
    static struct eph_http_request req;
    const char *s = "GET http://example.com/a?b=1 HTTP/1.1\r\n"
                    "Host: example.com\r\n"
                    "User-Agent:  curl/8 \t\r\n"
                    "Accept:\r\n"
                    "\r\n"
                    "BODY";
    assert_int_equal(parse(s, &req), 0);
    assert_int_equal(req.method_len, 3);
    assert_memory_equal(req.method, "GET", 3);
    assert_int_equal(req.target_len, strlen("http://example.com/a?b=1"));
    assert_memory_equal(req.target, "http://example.com/a?b=1", req.target_len);
    assert_int_equal(req.minor, 1);
    assert_int_equal(req.nheaders, 3);
    assert_int_equal(req.head_len, strlen(s) - 4);
    size_t n;
    const struct eph_http_header *h = eph_http_header_find(&req, "user-agent", &n);
    assert_non_null(h);
    assert_int_equal(n, 1);
    assert_int_equal(h->value_len, 6);
    assert_memory_equal(h->value, "curl/8", 6);
    h = eph_http_header_find(&req, "ACCEPT", NULL);
    assert_non_null(h);
    assert_int_equal(h->value_len, 0);
    assert_null(eph_http_header_find(&req, "Cookie", &n));
    assert_int_equal(n, 0);

    assert_int_equal(parse("CONNECT example.com:443 HTTP/1.0\r\n\r\n", &req), 0);
    assert_int_equal(req.minor, 0);
    assert_int_equal(req.nheaders, 0);
}

/* Every split of a valid head is "not yet" until the last byte, then the same head. */
static void test_request_incremental(void **state)
{
    static struct eph_http_request req;
    const char *s = "POST /github/repos HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n";
    size_t n = strlen(s);
    for (size_t k = 0; k < n; k++)
        assert_int_equal(eph_http_parse_request(s, k, &req), -EAGAIN);
    assert_int_equal(eph_http_parse_request(s, n, &req), 0);
    assert_int_equal(req.head_len, n);
}

static void test_request_bad(void **state)
{
    static struct eph_http_request req;
    static const char *bad[] = {
        "GET / HTTP/1.1\nHost: x\r\n\r\n",      /* bare LF */
        "GET / HTTP/1.1\r\nHost: x\n\r\n",      /* bare LF in a header */
        "GET / HTTP/1.1\r\nHost: x\rY\r\n\r\n", /* bare CR */
        "GET / HTTP/2.0\r\n\r\n",               /* version */
        "GET / HTTP/1.2\r\n\r\n",               /* version */
        "GET / http/1.1\r\n\r\n",               /* version */
        "GET  / HTTP/1.1\r\n\r\n",              /* empty target */
        "GET / HTTP/1.1 \r\n\r\n",              /* trailing space */
        "GET /\x01 HTTP/1.1\r\n\r\n",           /* control in the target */
        "GET /\xc3\xa9 HTTP/1.1\r\n\r\n",       /* non-ASCII in the target */
        "G(T / HTTP/1.1\r\n\r\n",               /* method not a token */
        " GET / HTTP/1.1\r\n\r\n",              /* empty method */
        "GET / HTTP/1.1\r\nHost : x\r\n\r\n",   /* space before the colon */
        "GET / HTTP/1.1\r\nHost x\r\n\r\n",     /* no colon */
        "GET / HTTP/1.1\r\n: x\r\n\r\n",        /* empty name */
        "GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n", /* folded */
        "GET / HTTP/1.1\r\nA: b\x01\r\n\r\n",   /* control in a value */
        "GET / HTTP/1.1\r\nA: b\x7f\r\n\r\n",   /* DEL in a value */
        "GET /\r\n\r\n",                        /* HTTP/0.9 */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (parse(bad[i], &req) != -EINVAL)
            fail_msg("accepted: %s", bad[i]);
    /* A NUL anywhere in the head. */
    const char nul[] = "GET / HTTP/1.1\r\nA: b\0c\r\n\r\n";
    assert_int_equal(eph_http_parse_request(nul, sizeof(nul) - 1, &req), -EINVAL);
}

static void test_request_caps(void **state)
{
    static struct eph_http_request req;
    /* A head that never ends is -EMSGSIZE once the cap is reached, -EAGAIN before. */
    size_t big = EPH_HTTP_MAX_HEAD + 10;
    char *s = malloc(big);
    assert_non_null(s);
    memcpy(s, "GET / HTTP/1.1\r\nX: ", 19);
    memset(s + 19, 'a', big - 19);
    assert_int_equal(eph_http_parse_request(s, EPH_HTTP_MAX_HEAD - 1, &req), -EAGAIN);
    assert_int_equal(eph_http_parse_request(s, EPH_HTTP_MAX_HEAD, &req), -EMSGSIZE);
    assert_int_equal(eph_http_parse_request(s, big, &req), -EMSGSIZE);
    /* 100 headers pass, 101 do not. */
    size_t off = 0;
    off += (size_t)sprintf(s + off, "GET / HTTP/1.1\r\n");
    for (int i = 0; i < EPH_HTTP_MAX_HEADERS; i++)
        off += (size_t)sprintf(s + off, "H%d: v\r\n", i);
    memcpy(s + off, "\r\n", 2);
    assert_int_equal(eph_http_parse_request(s, off + 2, &req), 0);
    assert_int_equal(req.nheaders, EPH_HTTP_MAX_HEADERS);
    off += (size_t)sprintf(s + off, "One: more\r\n\r\n");
    assert_int_equal(eph_http_parse_request(s, off, &req), -EMSGSIZE);
    free(s);
}

static int body(const char *headers, enum eph_http_body *kind, uint64_t *len)
{
    static struct eph_http_request req;
    char s[512];
    snprintf(s, sizeof(s), "POST / HTTP/1.1\r\n%s\r\n", headers);
    assert_int_equal(parse(s, &req), 0);
    return eph_http_request_body(&req, kind, len);
}

static void test_body_framing(void **state)
{
    enum eph_http_body kind;
    uint64_t len;
    assert_int_equal(body("", &kind, &len), 0);
    assert_int_equal(kind, EPH_HTTP_BODY_NONE);
    assert_int_equal(body("Content-Length: 42\r\n", &kind, &len), 0);
    assert_int_equal(kind, EPH_HTTP_BODY_LENGTH);
    assert_int_equal(len, 42);
    assert_int_equal(body("content-length: 0\r\n", &kind, &len), 0);
    assert_int_equal(len, 0);
    assert_int_equal(body("Transfer-Encoding: chunked\r\n", &kind, &len), 0);
    assert_int_equal(kind, EPH_HTTP_BODY_CHUNKED);
    assert_int_equal(body("Transfer-Encoding: Chunked\r\n", &kind, &len), 0);
    /* The smuggling cases. */
    static const char *bad[] = {
        "Content-Length: 1\r\nTransfer-Encoding: chunked\r\n",
        "Content-Length: 1\r\nContent-Length: 1\r\n",
        "Content-Length: 1\r\nContent-Length: 2\r\n",
        "Content-Length: 1, 1\r\n",
        "Content-Length: +1\r\n",
        "Content-Length: -1\r\n",
        "Content-Length: 0x10\r\n",
        "Content-Length: \r\n",
        "Content-Length: 99999999999999999\r\n",
        "Transfer-Encoding: gzip, chunked\r\n",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
        "Transfer-Encoding: identity\r\n",
        "Transfer-Encoding: chunked, identity\r\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (body(bad[i], &kind, &len) != -EINVAL)
            fail_msg("accepted: %s", bad[i]);
}

static int auth(const char *s, uint16_t def, struct eph_http_authority *a)
{
    return eph_http_parse_authority(s, strlen(s), def, a);
}

/* Decodes text through the chunked decoder in pieces of step bytes: the body, or NULL when it is
 * refused (or never ends). */
static char *dechunk(const char *text, size_t step, size_t *used_total)
{
    size_t n = strlen(text), at = 0, out = 0;
    char *all = malloc(n + 1), piece[256];
    struct eph_http_chunked c = {0};
    int r = 0;
    *used_total = 0;
    while (at < n && r == 0) {
        size_t k = n - at < step ? n - at : step, got, used;
        memcpy(piece, text + at, k);
        r = eph_http_chunked_decode(&c, piece, k, &got, &used);
        if (r >= 0) {
            memcpy(all + out, piece, got);
            out += got;
            *used_total += used;
        }
        at += k;
    }
    if (r != 1) {
        free(all);
        return NULL;
    }
    all[out] = '\0';
    return all;
}

static void test_chunked(void **state)
{
    static const char ok[] = "5\r\nhello\r\nA;name=\"v\"\r\n, world!!!\r\n0\r\n"
                             "Trailer-Field: x\r\n\r\nNEXT";
    for (size_t step = 1; step <= sizeof(ok); step++) {
        size_t used;
        char *body = dechunk(ok, step, &used);
        assert_non_null(body);
        assert_string_equal(body, "hello, world!!!");
        assert_int_equal(used, sizeof(ok) - 1 - 4); /* "NEXT" is not the body's */
        free(body);
    }
    size_t used;
    char *body = dechunk("0\r\n\r\n", 1, &used);
    assert_string_equal(body, "");
    free(body);
    body = dechunk("ffffffffffffffff\r\n", 3, &used); /* 2^64 - 1 > 2^53 */
    assert_null(body);
    const char *bad[] = {"",
                         "\r\n",
                         "x\r\n",
                         "5\nhello\r\n0\r\n\r\n",
                         "5 \r\nhello",
                         "5\r\nhelloX",
                         "5\r\nhello\r\r",
                         "-1\r\n",
                         "0\r\n\n",
                         "0\r\nT: x\n",
                         "20000000000001\r\n",
                         "00000000000000001\r\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        print_message("bad %zu\n", i);
        assert_null(dechunk(bad[i], 2, &used));
    }
    /* A size line or trailer longer than 4 KiB is refused, not buffered. */
    char *longline = malloc(6000);
    memcpy(longline, "1;", 2);
    memset(longline + 2, 'e', 5000);
    strcpy(longline + 5002, "\r\nx\r\n0\r\n\r\n");
    assert_null(dechunk(longline, 200, &used));
    free(longline);
}

static void test_authority(void **state)
{
    struct eph_http_authority a;
    assert_int_equal(auth("example.com:443", 0, &a), 0);
    assert_string_equal(a.host.name, "example.com");
    assert_false(a.host.literal);
    assert_int_equal(a.port, 443);
    assert_int_equal(auth("EXAMPLE.com.:8443", 0, &a), 0);
    assert_string_equal(a.host.name, "example.com");
    assert_int_equal(a.port, 8443);
    assert_int_equal(auth("[::1]:443", 0, &a), 0);
    assert_true(a.host.literal);
    assert_string_equal(a.host.name, "::1");
    assert_int_equal(auth("[::ffff:127.0.0.2]:80", 0, &a), 0);
    assert_int_equal(eph_addr_classify(&a.host.addr), EPH_ADDR_LOOPBACK);
    assert_int_equal(auth("2130706434:443", 0, &a), 0);
    assert_string_equal(a.host.name, "127.0.0.2");
    assert_int_equal(auth("0x7f000002:1", 0, &a), 0);
    assert_string_equal(a.host.name, "127.0.0.2");
    assert_int_equal(auth("127.0.0.1:65535", 0, &a), 0);
    assert_int_equal(a.port, 65535);
    /* With a default port. */
    assert_int_equal(auth("example.com", 80, &a), 0);
    assert_int_equal(a.port, 80);
    assert_int_equal(auth("[2001:db8::1]", 443, &a), 0);
    assert_int_equal(a.port, 443);

    static const char *bad[] = {
        "example.com", /* CONNECT needs a port */
        "example.com:",
        "example.com:0",
        "example.com:65536",
        "example.com:123456",
        "example.com:+80",
        "example.com:80x",
        "example.com:8 0",
        "user@example.com:443",
        "user:pw@example.com:443",
        "::1:443",
        "[::1]",
        "[::1]x",
        "[::1]:",
        "[example.com]:443",
        "[127.0.0.1]:443",
        ":443",
        "[]:443",
        "[::1:443",
        "1.2.3.256:443",
        "exa mple.com:443",
        "example.com:443:443",
        "[fe80::1%25eth0]:443",
        "",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (auth(bad[i], 0, &a) != -EINVAL)
            fail_msg("accepted: %s", bad[i]);
    assert_int_equal(auth("[::1]", 0, &a), -EINVAL);
}

static int url(const char *s, struct eph_http_url *u)
{
    return eph_http_parse_url(s, strlen(s), u);
}

static void test_url(void **state)
{
    struct eph_http_url u;
    assert_int_equal(url("http://example.com/a/b?x=1&y=2#frag", &u), 0);
    assert_false(u.https);
    assert_string_equal(u.auth.host.name, "example.com");
    assert_int_equal(u.auth.port, 80);
    assert_int_equal(u.path_len, 4);
    assert_memory_equal(u.path, "/a/b", 4);
    assert_int_equal(u.query_len, 7);
    assert_memory_equal(u.query, "x=1&y=2", 7);

    assert_int_equal(url("HTTPS://Example.com", &u), 0);
    assert_true(u.https);
    assert_int_equal(u.auth.port, 443);
    assert_int_equal(u.path_len, 1);
    assert_memory_equal(u.path, "/", 1);
    assert_null(u.query);

    assert_int_equal(url("http://[::1]:8080?q", &u), 0);
    assert_string_equal(u.auth.host.name, "::1");
    assert_int_equal(u.auth.port, 8080);
    assert_memory_equal(u.path, "/", 1);
    assert_int_equal(u.query_len, 1);

    assert_int_equal(url("http://2130706434/", &u), 0);
    assert_string_equal(u.auth.host.name, "127.0.0.2");
    assert_int_equal(url("http://localhost./x", &u), 0);
    assert_string_equal(u.auth.host.name, "localhost");

    static const char *bad[] = {
        "ftp://example.com/",
        "file:///etc/passwd",
        "//example.com/",
        "http:/example.com/",
        "http://",
        "http:///a",
        "http://user@example.com/",
        "http://example.com:0/",
        "http://exa mple.com/",
        "http://example.com/a b",
        "http://example.com\\@evil.com/",
        "http://example.com/\x01",
        "http://example.com/\xc3\xa9",
        "/relative",
        "http://[::1/",
        "gopher://x/",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (url(bad[i], &u) != -EINVAL)
            fail_msg("accepted: %s", bad[i]);
}

static void norm_ok(const char *in, const char *want)
{
    char out[256];
    int n = eph_http_normalize_path(in, strlen(in), out, sizeof(out));
    if (n < 0)
        fail_msg("'%s' refused: %d", in, n);
    if (strcmp(out, want) != 0 || (size_t)n != strlen(want))
        fail_msg("'%s' became '%s', not '%s'", in, out, want);
}

static void norm_bad(const char *in)
{
    char out[256];
    int n = eph_http_normalize_path(in, strlen(in), out, sizeof(out));
    if (n != -EINVAL)
        fail_msg("'%s' was not refused (%d: '%s')", in, n, n >= 0 ? out : "");
}

static void test_normalize(void **state)
{
    norm_ok("/", "/");
    norm_ok("/repos/o/r", "/repos/o/r");
    norm_ok("/repos/o/r/", "/repos/o/r/");
    norm_ok("/allowed/../secret", "/secret");
    norm_ok("/allowed/./x", "/allowed/x");
    norm_ok("/allowed/x/..", "/allowed/");
    norm_ok("/allowed/x/.", "/allowed/x/");
    norm_ok("/a/b/../../c", "/c");
    norm_ok("/allowed/%2e%2e/secret", "/secret");
    norm_ok("/allowed/%2E%2E/secret", "/secret");
    norm_ok("/allowed/.%2e/secret", "/secret");
    norm_ok("/allowed/%2e/x", "/allowed/x");
    norm_ok("/allowed/..;x/secret", "/secret");
    norm_ok("/allowed/..%3bx/secret", "/secret");
    norm_ok("/%61llowed", "/allowed"); /* unreserved: decoded */
    norm_ok("/a%7eb", "/a~b");
    norm_ok("/a%3fb", "/a%3Fb"); /* reserved: kept, upper-cased */
    norm_ok("/a%25b", "/a%25b");
    norm_ok("/a%20b", "/a%20b");
    norm_ok("/a;b=c/d", "/a;b=c/d");
    norm_ok("/...", "/..."); /* not a dot segment */
    norm_ok("/.a/..b", "/.a/..b");

    norm_bad("");
    norm_bad("relative");
    norm_bad("/..");
    norm_bad("/../secret");
    norm_bad("/a/../../secret");
    norm_bad("/%2e%2e/secret");
    norm_bad("//secret");
    norm_bad("/allowed//secret");
    norm_bad("/allowed/%2f../secret");
    norm_bad("/allowed%2F..%2Fsecret");
    norm_bad("/allowed%5c..%5csecret");
    norm_bad("/allowed\\..\\secret");
    norm_bad("/a%00b");
    norm_bad("/a%0d%0aX-Injected:%20y");
    norm_bad("/a%7f");
    norm_bad("/a%");
    norm_bad("/a%2");
    norm_bad("/a%zz");
    norm_bad("/a b");
    norm_bad("/a#b");
    norm_bad("/a?b");
    norm_bad("/\xc3\xa9");
    norm_bad("/a\x01");
    norm_bad("/a/..;/..;/secret");
}

static void test_normalize_cap(void **state)
{
    char out[8];
    assert_int_equal(eph_http_normalize_path("/abcdef", 7, out, sizeof(out)), 7);
    assert_int_equal(eph_http_normalize_path("/abcdefg", 8, out, sizeof(out)), -EMSGSIZE);
    assert_int_equal(eph_http_normalize_path("/abc/%3F", 8, out, sizeof(out)), -EMSGSIZE);
    assert_int_equal(eph_http_normalize_path("/", 1, out, 0), -EMSGSIZE);
    /* Only len bytes are read. */
    assert_int_equal(eph_http_normalize_path("/ab/../secret", 3, out, sizeof(out)), 3);
    assert_string_equal(out, "/ab");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_ok),    cmocka_unit_test(test_request_incremental),
        cmocka_unit_test(test_request_bad),   cmocka_unit_test(test_request_caps),
        cmocka_unit_test(test_body_framing),  cmocka_unit_test(test_authority),
        cmocka_unit_test(test_url),           cmocka_unit_test(test_normalize),
        cmocka_unit_test(test_normalize_cap), cmocka_unit_test(test_chunked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
