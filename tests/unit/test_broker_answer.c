/* A connection's answer on its way to the program (docs/SECURITY.md, docs/BROKER.md): gzip, deflate
 * (zlib's wrapper and raw) and br bodies are decoded, redacted and relayed with their own length
 * and without Content-Encoding; an unknown or double encoding, a corrupt or cut stream and a bomb
 * are refused before a byte reaches the program; trailers never join the body; the credential is
 * redacted in every header (Location, Set-Cookie) and in the body, whatever the pieces. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <zlib.h>

#include "broker/answer.h"
#include "broker/decode.h"

#define TOKEN "tok-9f8e7d"

static int capture(void *arg, const void *data, size_t n)
{
    return eph_buf_append(arg, data, n);
}

/* zlib's compress in the given format: 31 gzip, 15 zlib, -15 raw deflate. */
static size_t squeeze(const char *in, size_t n, int bits, unsigned char *out, size_t cap)
{
    z_stream z = {0};
    assert_int_equal(deflateInit2(&z, 6, Z_DEFLATED, bits, 8, Z_DEFAULT_STRATEGY), Z_OK);
    z.next_in = (unsigned char *)in;
    z.avail_in = (uInt)n;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
    size_t len = cap - z.avail_out;
    deflateEnd(&z);
    return len;
}

struct result {
    char *out; /* what the program got */
    int rc;    /* the first error */
    const char *refused;
};

/* Feeds the head lines, then the body in pieces of piece bytes (0: whole), then ends. */
static struct result run(const char *const *lines, const void *body, size_t blen, size_t piece,
                         uint64_t cap)
{
    struct eph_buf got;
    struct eph_answer a;
    eph_buf_init(&got, 1 << 24);
    eph_answer_init(&a, cap, capture, &got);
    assert_int_equal(eph_redactor_add_header_value(&a.red, "Bearer " TOKEN), 0);
    assert_int_equal(eph_redactor_seal(&a.red), 0);
    int rc = 0;
    for (size_t i = 0; lines[i] && !rc; i++)
        rc = eph_answer_header(&a, lines[i], strlen(lines[i]));
    const char *b = body;
    for (size_t off = 0; !rc && off < blen;) {
        size_t n = piece && piece < blen - off ? piece : blen - off;
        rc = eph_answer_body(&a, b + off, n);
        off += n;
    }
    if (!rc)
        rc = eph_answer_end(&a);
    struct result r = {
        .out = got.data ? eph_buf_steal(&got) : strdup(""), .rc = rc, .refused = a.refused};
    if (a.refused)
        assert_false(a.head_sent);
    eph_answer_release(&a);
    eph_buf_release(&got);
    return r;
}

static const char text[] = "{\"echo\": \"Bearer " TOKEN "\", \"url\": \"https:\\/\\/x\\/?t=" TOKEN
                           "\"} and the token alone: " TOKEN " in plain text.";
static const char want_body[] =
    "{\"echo\": \"[REDACTED]\", \"url\": \"https:\\/\\/x\\/?t=[REDACTED]"
    "\"} and the token alone: [REDACTED] in plain text.";

static void expect_decoded(const char *encoding, const unsigned char *body, size_t blen)
{
    char ce[64];
    snprintf(ce, sizeof(ce), "Content-Encoding: %s\r\n", encoding);
    const char *lines[] = {"HTTP/1.1 200 OK\r\n",
                           "Content-Type: application/json\r\n",
                           ce,
                           "Content-Length: 999\r\n",
                           "\r\n",
                           NULL};
    char want[1024];
    snprintf(want, sizeof(want),
             "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
             "Connection: close\r\n\r\n%s",
             strlen(want_body), want_body);
    for (size_t piece = 0; piece <= blen; piece += piece < 8 ? 1 : 7) {
        struct result r = run(lines, body, blen, piece, 1 << 20);
        assert_int_equal(r.rc, 0);
        if (strcmp(r.out, want) != 0)
            fail_msg("%s in pieces of %zu: got '%s'", encoding, piece, r.out);
        free(r.out);
    }
}

static void test_gzip_deflate_br(void **state)
{
    unsigned char z[2048];
    size_t n = squeeze(text, strlen(text), 31, z, sizeof(z));
    expect_decoded("gzip", z, n);
    expect_decoded("x-gzip", z, n);
    expect_decoded("GZIP, identity", z, n);
    /* Two gzip members one after the other are one body. */
    unsigned char two[4096];
    size_t half = strlen(text) / 2;
    size_t n1 = squeeze(text, half, 31, two, sizeof(two));
    size_t n2 = squeeze(text + half, strlen(text) - half, 31, two + n1, sizeof(two) - n1);
    expect_decoded("gzip", two, n1 + n2);
    n = squeeze(text, strlen(text), 15, z, sizeof(z));
    expect_decoded("deflate", z, n);
    n = squeeze(text, strlen(text), -15, z, sizeof(z));
    expect_decoded("deflate", z, n); /* raw, as some servers send it */
    /* Made with libbrotlienc: the same redaction applies to what it decodes to. */
    static const unsigned char br[] =
        "\x1b\x2f\x00\x00\x44\x37\x97\xea\xe8\x6a\x55\x6d\x51\xf4\x70\x38\x08\xe7\xe5\xb0\x01"
        "\x07\xec\x61\xa8\xc9\xec\x27\x47\x1d\x3f\xef\xbc\xb3\x91\x53\x3f\xe0\x4a\x65\x5f\xd6"
        "\x5a\x04\xc7\xbd\x0a";
    const char *lines[] = {"HTTP/1.1 200 OK\r\n", "Content-Encoding: br\r\n", "\r\n", NULL};
    struct result r = run(lines, br, sizeof(br) - 1, 5, 1 << 20);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.out, "HTTP/1.1 200 OK\r\nContent-Length: 48\r\nConnection: close\r\n\r\n"
                               "brotli body: token [REDACTED], twice [REDACTED].");
    free(r.out);
}

static void expect_refused(const char *const *lines, const void *body, size_t blen, uint64_t cap,
                           const char *code)
{
    for (size_t piece = 0; piece <= 64; piece += 16) {
        struct result r = run(lines, body, blen, piece, cap);
        assert_true(r.rc < 0);
        if (!r.refused || strcmp(r.refused, code) != 0)
            fail_msg("wanted %s, got %s", code, r.refused ? r.refused : "nothing");
        assert_string_equal(r.out, ""); /* not a byte of it */
        free(r.out);
    }
}

static void test_refusals(void **state)
{
    unsigned char z[2048];
    size_t n = squeeze(text, strlen(text), 31, z, sizeof(z));
    const char *gz[] = {"HTTP/1.1 200 OK\r\n", "Content-Encoding: gzip\r\n", "\r\n", NULL};
    /* Unknown codings, two codings, a coding with junk: refused at the head. */
    static const char *const encodings[] = {"zstd", "gzip, br", "compress", "gzip;q=1", "gzip x"};
    for (size_t i = 0; i < sizeof(encodings) / sizeof(encodings[0]); i++) {
        char ce[64];
        snprintf(ce, sizeof(ce), "Content-Encoding: %s\r\n", encodings[i]);
        const char *lines[] = {"HTTP/1.1 200 OK\r\n", ce, "\r\n", NULL};
        expect_refused(lines, z, n, 1 << 20, "unsupported_encoding");
    }
    /* Two headers, one coding each: a double encoding. */
    const char *dbl[] = {"HTTP/1.1 200 OK\r\n", "Content-Encoding: gzip\r\n",
                         "Content-Encoding: deflate\r\n", "\r\n", NULL};
    expect_refused(dbl, z, n, 1 << 20, "unsupported_encoding");
    /* Corrupt, cut short, junk after the end, plain text that says it is gzip. */
    unsigned char bad[2048];
    memcpy(bad, z, n);
    bad[n / 2] ^= 0x55;
    expect_refused(gz, bad, n, 1 << 20, "bad_encoding");
    expect_refused(gz, z, n - 4, 1 << 20, "bad_encoding");
    memcpy(bad, z, n);
    memcpy(bad + n, "junk", 4);
    expect_refused(gz, bad, n + 4, 1 << 20, "bad_encoding");
    expect_refused(gz, text, strlen(text), 1 << 20, "bad_encoding");
    const char *df[] = {"HTTP/1.1 200 OK\r\n", "Content-Encoding: deflate\r\n", "\r\n", NULL};
    expect_refused(df, "x", 1, 1 << 20, "bad_encoding");
    const char *br[] = {"HTTP/1.1 200 OK\r\n", "Content-Encoding: br\r\n", "\r\n", NULL};
    expect_refused(br, text, strlen(text), 1 << 20, "bad_encoding");
    /* A bomb: 8 MiB of zeros in a few KiB, against a 64 KiB cap. */
    size_t big = 8u << 20;
    char *zeros = calloc(1, big);
    unsigned char *bomb = malloc(big / 100);
    size_t bn = squeeze(zeros, big, 31, bomb, big / 100);
    expect_refused(gz, bomb, bn, 64 << 10, "response_too_large");
    free(zeros);
    free(bomb);
}

/* A compressed answer to HEAD (or a 204, 304): no body, its head without Content-Encoding. */
static void test_no_body(void **state)
{
    const char *lines[] = {"HTTP/1.1 304 Not Modified\r\n", "Content-Encoding: gzip\r\n",
                           "ETag: \"x\"\r\n", "\r\n", NULL};
    struct result r = run(lines, NULL, 0, 0, 1 << 20);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.out,
                        "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\nConnection: close\r\n\r\n");
    free(r.out);
}

/* libcurl hands a chunked body's trailer to the header callback after the body: dropped. The
 * head's framing is the broker's own; 1xx heads are skipped; Location and Set-Cookie redacted. */
static void test_head_and_trailer(void **state)
{
    const char *lines[] = {"HTTP/1.1 100 Continue\r\n",
                           "\r\n",
                           "HTTP/1.1 302 Found\r\n",
                           "Transfer-Encoding: chunked\r\n",
                           "Location: https://x/next?key=tok-9f8e7d&b=tok%2D9f8e7d\r\n",
                           "Set-Cookie: s=dG9rLTlmOGU3ZA; Path=/\r\n",
                           "Connection: keep-alive\r\n",
                           "\r\n",
                           NULL};
    struct eph_buf got;
    struct eph_answer a;
    eph_buf_init(&got, 1 << 20);
    eph_answer_init(&a, 1 << 20, capture, &got);
    assert_int_equal(eph_redactor_add_header_value(&a.red, "Bearer " TOKEN), 0);
    assert_int_equal(eph_redactor_seal(&a.red), 0);
    for (size_t i = 0; lines[i]; i++)
        assert_int_equal(eph_answer_header(&a, lines[i], strlen(lines[i])), 0);
    assert_int_equal(a.status, 302);
    assert_int_equal(eph_answer_body(&a, "hel", 3), 0);
    assert_int_equal(eph_answer_body(&a, "lo", 2), 0);
    assert_int_equal(eph_answer_header(&a, "X-Tr: " TOKEN "\r\n", 18), 0);
    assert_int_equal(eph_answer_header(&a, "\r\n", 2), 0);
    assert_int_equal(eph_answer_end(&a), 0);
    assert_string_equal(got.data, "HTTP/1.1 302 Found\r\n"
                                  "Location: https://x/next?key=[REDACTED]&b=[REDACTED]\r\n"
                                  "Set-Cookie: s=[REDACTED]; Path=/\r\n"
                                  "Connection: close\r\n\r\nhello");
    eph_answer_release(&a);
    eph_buf_release(&got);
}

/* A plain body is relayed as it comes, and cut at the cap. */
static void test_plain_cap(void **state)
{
    const char *lines[] = {"HTTP/1.1 200 OK\r\n", "\r\n", NULL};
    struct result r = run(lines, "0123456789" TOKEN "abcdef", 26, 4, 1 << 20);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.out,
                        "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n0123456789[REDACTED]abcdef");
    free(r.out);
    r = run(lines, "0123456789abcdef", 16, 4, 48);
    assert_int_equal(r.rc, -EMSGSIZE);
    assert_null(r.refused); /* the head went out: cut, not refused */
    free(r.out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gzip_deflate_br), cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_no_body),         cmocka_unit_test(test_head_and_trailer),
        cmocka_unit_test(test_plain_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
