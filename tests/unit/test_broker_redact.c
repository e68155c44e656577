/* The streaming redactor (docs/BROKER.md, docs/SECURITY.md): every credential value an upstream
 * echoes, in every form redact.h lists (raw in any case, percent-encoded, JSON-escaped, hex, base64
 * and base64url whole and at each alignment inside a larger text), becomes [REDACTED] before a byte
 * reaches the sandbox, whatever the split of the stream into reads; with any number of values, and
 * a Basic credential's user and password. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <sodium.h>

#include "broker/redact.h"

/* Redacts in pieces of the given sizes (cycled), returns the output (free it). */
static char *redact_split(const char *const *values, size_t nv, const char *in, const size_t *sizes,
                          size_t nsizes)
{
    struct eph_redactor r;
    struct eph_buf out;
    eph_buf_init(&out, 1 << 20);
    assert_int_equal(eph_redactor_init(&r, values, nv), 0);
    size_t len = strlen(in), off = 0, k = 0;
    while (off < len) {
        size_t n = sizes[k++ % nsizes];
        if (n > len - off)
            n = len - off;
        assert_int_equal(eph_redactor_feed(&r, in + off, n, &out), 0);
        off += n;
    }
    assert_int_equal(eph_redactor_finish(&r, &out), 0);
    eph_redactor_release(&r);
    if (!out.data)
        return strdup("");
    return eph_buf_steal(&out);
}

static void expect(const char *const *values, size_t nv, const char *in, const char *want)
{
    /* Every fixed piece size, and one uneven pattern. */
    static const size_t uneven[] = {3, 1, 7, 2, 11};
    for (size_t sz = 1; sz <= strlen(in) + 1; sz++) {
        char *got = redact_split(values, nv, in, &sz, 1);
        if (strcmp(got, want) != 0)
            fail_msg("pieces of %zu: '%s' became '%s', not '%s'", sz, in, got, want);
        free(got);
    }
    char *got = redact_split(values, nv, in, uneven, 5);
    assert_string_equal(got, want);
    free(got);
}

static void test_redact(void **state)
{
    static const char *const v[] = {"sk-live-SECRET", "tok_42"};
    expect(v, 2, "nothing to hide", "nothing to hide");
    expect(v, 2, "sk-live-SECRET", "[REDACTED]");
    expect(v, 2, "Authorization: Bearer sk-live-SECRET\r\n",
           "Authorization: Bearer [REDACTED]\r\n");
    expect(v, 2, "{\"echo\":\"sk-live-SECRETsk-live-SECRET\",\"t\":\"tok_42\"}",
           "{\"echo\":\"[REDACTED][REDACTED]\",\"t\":\"[REDACTED]\"}");
    /* Near misses go through untouched, also at the very end. */
    expect(v, 2, "sk-live-SECRE", "sk-live-SECRE");
    expect(v, 2, "sk-live-SECREx tok_4", "sk-live-SECREx tok_4");
    expect(v, 2, "ssk-live-SECRET", "s[REDACTED]");
    expect(v, 2, "tok_4tok_42", "tok_4[REDACTED]");
    expect(v, 2, "", "");
}

static void test_longest_wins(void **state)
{
    static const char *const v[] = {"abc", "abcdef"};
    expect(v, 2, "xabcdefy", "x[REDACTED]y");
    expect(v, 2, "xabcdey", "x[REDACTED]dey");
    expect(v, 2, "abcde", "[REDACTED]de");
    static const char *const w[] = {"aab"};
    expect(w, 1, "aaab", "a[REDACTED]");
    expect(w, 1, "aaaaab", "aaa[REDACTED]");
}

static void test_no_values(void **state)
{
    static const char *const v[] = {""};
    expect(v, 1, "anything", "anything");
    expect(NULL, 0, "anything", "anything");
}

static void test_bounds(void **state)
{
    struct eph_redactor r;
    char *big = malloc(EPH_REDACT_MAX_VALUE + 2);
    memset(big, 'k', EPH_REDACT_MAX_VALUE + 1);
    big[EPH_REDACT_MAX_VALUE + 1] = '\0';
    const char *one[] = {big};
    assert_int_equal(eph_redactor_init(&r, one, 1), -EINVAL);
    /* The longest value is accepted, and its longest form (JSON, six bytes a byte) is held. */
    big[EPH_REDACT_MAX_VALUE] = '\0';
    assert_int_equal(eph_redactor_init(&r, one, 1), 0);
    struct eph_buf out;
    eph_buf_init(&out, 1 << 20);
    assert_int_equal(eph_redactor_feed(&r, big, EPH_REDACT_MAX_VALUE, &out), 0);
    assert_int_equal(eph_redactor_finish(&r, &out), 0);
    assert_string_equal(out.data, EPH_REDACTED);
    eph_redactor_release(&r);
    eph_buf_release(&out);
    free(big);
    /* The output's cap is reported, not overrun. */
    static const char *const v[] = {"secret"};
    eph_buf_init(&out, 8);
    assert_int_equal(eph_redactor_init(&r, v, 1), 0);
    assert_int_equal(eph_redactor_feed(&r, "a secret", 8, &out), -EMSGSIZE);
    eph_redactor_release(&r);
    eph_buf_release(&out);
}

/* Every split of in into two and three pieces, and every fixed piece size (expect above). */
static void expect_splits(const char *const *values, size_t nv, const char *in, const char *want)
{
    size_t n = strlen(in);
    expect(values, nv, in, want);
    for (size_t a = 0; a <= n; a++) {
        for (size_t b = a; b <= n; b += (n / 7) + 1) {
            struct eph_redactor r;
            struct eph_buf out;
            eph_buf_init(&out, 1 << 20);
            assert_int_equal(eph_redactor_init(&r, values, nv), 0);
            assert_int_equal(eph_redactor_feed(&r, in, a, &out), 0);
            assert_int_equal(eph_redactor_feed(&r, in + a, b - a, &out), 0);
            assert_int_equal(eph_redactor_feed(&r, in + b, n - b, &out), 0);
            assert_int_equal(eph_redactor_finish(&r, &out), 0);
            eph_redactor_release(&r);
            if (strcmp(out.data ? out.data : "", want) != 0)
                fail_msg("split at %zu and %zu: '%s' became '%s', not '%s'", a, b, in, out.data,
                         want);
            eph_buf_release(&out);
        }
    }
}

/* "<" form ">" becomes "<[REDACTED]>", whatever the splits. */
static void expect_form(const char *const *values, size_t nv, const char *form, const char *what)
{
    char in[1024];
    snprintf(in, sizeof(in), "echo <%s> end", form);
    struct eph_redactor r;
    struct eph_buf out;
    eph_buf_init(&out, 1 << 20);
    assert_int_equal(eph_redactor_init(&r, values, nv), 0);
    assert_int_equal(eph_redactor_feed(&r, in, strlen(in), &out), 0);
    assert_int_equal(eph_redactor_finish(&r, &out), 0);
    eph_redactor_release(&r);
    if (strcmp(out.data, "echo <" EPH_REDACTED "> end") != 0)
        fail_msg("%s: '%s' became '%s'", what, in, out.data);
    eph_buf_release(&out);
    expect_splits(values, nv, in, "echo <" EPH_REDACTED "> end");
}

static void pct(const char *v, char *out, const char *hexd, bool plus, const char *keep)
{
    for (; *v; v++) {
        unsigned char c = (unsigned char)*v;
        if (plus && c == ' ')
            *out++ = '+';
        else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 (c && strchr(keep, c)))
            *out++ = (char)c;
        else {
            *out++ = '%';
            *out++ = hexd[c >> 4];
            *out++ = hexd[c & 15];
        }
    }
    *out = '\0';
}

static void json_all(const char *v, char *out, const char *hexd)
{
    for (; *v; v++) {
        unsigned char c = (unsigned char)*v;
        out += sprintf(out, "\\u00%c%c", hexd[c >> 4], hexd[c & 15]);
    }
    *out = '\0';
}

/* Each form of a value with every character an encoder may touch. */
static void test_every_form(void **state)
{
    static const char *const v[] = {"qk7/a+b=c d&e"};
    const char *val = v[0];
    char f[512];
    expect_form(v, 1, val, "raw");
    expect_form(v, 1, "QK7/A+B=C D&E", "upper case");
    expect_form(v, 1, "Qk7/A+b=C d&E", "mixed case");
    pct(val, f, "0123456789ABCDEF", false, "-._~");
    expect_form(v, 1, f, "percent, upper hex");
    pct(val, f, "0123456789abcdef", false, "-._~");
    expect_form(v, 1, f, "percent, lower hex");
    pct(val, f, "0123456789ABCDEF", true, "-._~");
    expect_form(v, 1, f, "form encoding (+ for space)");
    pct(val, f, "0123456789abcdef", false, "/"); /* Python's quote(): '/' kept */
    expect_form(v, 1, f, "percent, '/' kept");
    for (size_t i = 0, o = 0; val[i]; i++) /* every byte escaped */
        o += (size_t)sprintf(f + o, "%%%02X", (unsigned char)val[i]);
    expect_form(v, 1, f, "percent, every byte");
    CURL *h = curl_easy_init();
    char *esc = curl_easy_escape(h, val, 0);
    expect_form(v, 1, esc, "curl_easy_escape");
    curl_free(esc);
    curl_easy_cleanup(h);
    expect_form(v, 1, "qk7\\/a+b=c d&e", "JSON, \\/");
    json_all(val, f, "0123456789abcdef");
    expect_form(v, 1, f, "JSON, every byte \\u00xx");
    json_all(val, f, "0123456789ABCDEF");
    expect_form(v, 1, f, "JSON, every byte \\u00XX");
    expect_form(v, 1, "qk7\\/a\\u002bb\\u003dc d\\u0026e", "JSON, some escaped (HTML-safe)");
    sodium_bin2hex(f, sizeof(f), (const unsigned char *)val, strlen(val));
    expect_form(v, 1, f, "hex");
    for (char *p = f; *p; p++)
        *p = (char)(*p >= 'a' && *p <= 'f' ? *p - 32 : *p);
    expect_form(v, 1, f, "HEX");
    static const int variants[] = {
        sodium_base64_VARIANT_ORIGINAL, sodium_base64_VARIANT_ORIGINAL_NO_PADDING,
        sodium_base64_VARIANT_URLSAFE, sodium_base64_VARIANT_URLSAFE_NO_PADDING};
    for (size_t i = 0; i < 4; i++) {
        sodium_bin2base64(f, sizeof(f), (const unsigned char *)val, strlen(val), variants[i]);
        expect_form(v, 1, f, "base64");
    }
    /* A value with the characters that start escapes ('%' and '\\') has separate raw, percent
     * and JSON forms: a shared matcher would read its own "%41" as "A". */
    static const char *const e[] = {"p%41\\x/y z"};
    expect_form(e, 1, e[0], "raw with % and \\");
    expect_form(e, 1, "P%41\\X/Y Z", "raw with % and \\, upper case");
    pct(e[0], f, "0123456789ABCDEF", false, "-._~");
    expect_form(e, 1, f, "percent with % and \\");
    pct(e[0], f, "0123456789abcdef", true, "");
    expect_form(e, 1, f, "form encoding with % and \\");
    expect_form(e, 1, "p%41\\\\x\\/y z", "JSON with % and \\");
    json_all(e[0], f, "0123456789abcdef");
    expect_form(e, 1, f, "JSON \\u00xx with % and \\");
    expect_splits(e, 1, "pA\\x/y z", "pA\\x/y z"); /* "%41" is not "A" here */
    /* JSON escapes of UTF-8: a character's code point, a surrogate pair, Latin-1 bytes. */
    static const char *const u[] = {"p\xc3\xa4ss\xe2\x82\xac\xf0\x9f\x98\x80w"};
    expect_form(u, 1, u[0], "UTF-8 raw");
    expect_form(u, 1, "p\\u00e4ss\\u20AC\\ud83d\\ude00w", "JSON code points");
    expect_form(u, 1, "p\\u00c3\\u00a4ss\\u00e2\\u0082\\u00ac\\u00f0\\u009f\\u0098\\u0080w",
                "JSON, bytes as Latin-1");
    pct(u[0], f, "0123456789abcdef", false, "");
    expect_form(u, 1, f, "UTF-8 percent-encoded");
}

/* Near misses go through as they are: an escape of another byte, an invalid escape, a cut
 * form at the very end, base64 of something else. */
static void test_form_near_misses(void **state)
{
    static const char *const v[] = {"qk7/a+b"};
    expect_splits(v, 1, "qk7%2Fa+c", "qk7%2Fa+c");
    expect_splits(v, 1, "qk7%2Ga+b", "qk7%2Ga+b");
    expect_splits(v, 1, "x qk7%2Fa%2", "x qk7%2Fa%2");
    expect_splits(v, 1, "qk7\\/a\\u002", "qk7\\/a\\u002");
    expect_splits(v, 1, "qk7\\xa+b", "qk7\\xa+b");
    expect_splits(v, 1, "cWs3L2Erxw==", "cWs3L2Erxw==");
    expect_splits(v, 1, "qk7 a+b", "qk7 a+b");
}

/* An echo of the value inside a larger base64 text, at each of the three byte alignments and with
 * any text after it: what stays of the text around [REDACTED] holds at most 4 bits of the value
 * at each end. */
static void test_base64_alignments(void **state)
{
    static const char *const v[] = {"Zq9-credential-42"};
    size_t vl = strlen(v[0]);
    for (size_t pre = 0; pre < 6; pre++) {
        for (size_t post = 0; post < 6; post++) {
            for (int url = 0; url < 2; url++) {
                unsigned char bin[64];
                char enc[128], want[256];
                for (size_t i = 0; i < pre; i++)
                    bin[i] = (unsigned char)(0xa5 + 7 * i);
                memcpy(bin + pre, v[0], vl);
                for (size_t i = 0; i < post; i++)
                    bin[pre + vl + i] = (unsigned char)(0x3c + 11 * i);
                sodium_bin2base64(enc, sizeof(enc), bin, pre + vl + post,
                                  url ? sodium_base64_VARIANT_URLSAFE
                                      : sodium_base64_VARIANT_ORIGINAL);
                struct eph_redactor r;
                struct eph_buf out;
                eph_buf_init(&out, 1 << 20);
                assert_int_equal(eph_redactor_init(&r, v, 1), 0);
                assert_int_equal(eph_redactor_feed(&r, enc, strlen(enc), &out), 0);
                assert_int_equal(eph_redactor_finish(&r, &out), 0);
                eph_redactor_release(&r);
                const char *m = strstr(out.data, EPH_REDACTED);
                if (!m)
                    fail_msg("pre %zu post %zu: '%s' not redacted", pre, post, enc);
                size_t pl = (size_t)(m - out.data);
                size_t sl = strlen(m + strlen(EPH_REDACTED)), el = strlen(enc);
                /* Bits of the value in the prefix kept: bits [8 pre, 6 pl); in the suffix:
                 * bits [6 (el - sl), 8 (pre + vl)). */
                long lead = 6 * (long)pl - 8 * (long)pre;
                long tail = 8 * (long)(pre + vl) - 6 * (long)(el - sl);
                if (lead > 4 || tail > 4)
                    fail_msg("pre %zu post %zu: '%s' became '%s' (%ld, %ld bits kept)", pre, post,
                             enc, out.data, lead, tail);
                assert_memory_equal(out.data, enc, pl);
                assert_string_equal(m + strlen(EPH_REDACTED), enc + el - sl);
                snprintf(want, sizeof(want), "%s", out.data);
                eph_buf_release(&out);
                /* The same in every split. */
                char in[160];
                snprintf(in, sizeof(in), "%s", enc);
                expect(v, 1, in, want);
            }
        }
    }
}

/* No cap on the number of values: 300 of them (more than a connection's 32 headers, their
 * tokens, Basic's parts and 32 query values), every one redacted. */
static void test_many_values(void **state)
{
    enum { N = 300 };
    char *vals[N], *text = malloc(N * 64);
    size_t tl = 0;
    for (size_t i = 0; i < N; i++) {
        vals[i] = malloc(32);
        snprintf(vals[i], 32, "v%03zu-%08x", i, (unsigned)(i * 2654435761u));
        tl += (size_t)sprintf(text + tl, "[%s]", vals[i]);
    }
    struct eph_redactor r;
    struct eph_buf out;
    eph_buf_init(&out, 1 << 20);
    assert_int_equal(eph_redactor_init(&r, (const char *const *)vals, N), 0);
    for (size_t i = 0; i < tl; i += 7)
        assert_int_equal(eph_redactor_feed(&r, text + i, tl - i < 7 ? tl - i : 7, &out), 0);
    assert_int_equal(eph_redactor_finish(&r, &out), 0);
    eph_redactor_release(&r);
    for (size_t i = 0; i < N; i++) {
        if (strstr(out.data, vals[i]))
            fail_msg("value %zu survived", i);
        free(vals[i]);
    }
    assert_int_equal(out.len, (size_t)N * (strlen(EPH_REDACTED) + 2));
    eph_buf_release(&out);
    free(text);
}

/* A header value: the whole, the token after its scheme, and Basic's decoded user and password,
 * each in every form. */
static void test_header_values(void **state)
{
    char basic[128], b64[96];
    const char *up = "alice-user:s3cr3t/pass";
    sodium_bin2base64(b64, sizeof(b64), (const unsigned char *)up, strlen(up),
                      sodium_base64_VARIANT_ORIGINAL);
    snprintf(basic, sizeof(basic), "Basic %s", b64);
    static const char *const inputs[][2] = {
        {"user=alice-user", "user=[REDACTED]"},
        {"password: s3cr3t/pass!", "password: [REDACTED]!"},
        {"{\"p\":\"s3cr3t\\/pass\"}", "{\"p\":\"[REDACTED]\"}"},
        {"?p=s3cr3t%2Fpass&u=ALICE-USER", "?p=[REDACTED]&u=[REDACTED]"},
        {"alice-user:s3cr3t/pass", "[REDACTED]"},
    };
    for (size_t i = 0; i < sizeof(inputs) / sizeof(inputs[0]); i++) {
        struct eph_redactor r;
        struct eph_buf out;
        eph_buf_init(&out, 1 << 16);
        eph_redactor_begin(&r);
        assert_int_equal(eph_redactor_add_header_value(&r, basic), 0);
        assert_int_equal(eph_redactor_add_header_value(&r, "Bearer tok-9f8e7d"), 0);
        assert_int_equal(eph_redactor_seal(&r), 0);
        assert_int_equal(eph_redactor_feed(&r, inputs[i][0], strlen(inputs[i][0]), &out), 0);
        assert_int_equal(eph_redactor_finish(&r, &out), 0);
        assert_string_equal(out.data, inputs[i][1]);
        eph_buf_reset(&out);
        /* The bearer token alone, its base64, and the whole Basic value. */
        const char *more = "auth tok-9f8e7d and dG9rLTlmOGU3ZA== and Basic ";
        assert_int_equal(eph_redactor_feed(&r, more, strlen(more), &out), 0);
        assert_int_equal(eph_redactor_feed(&r, b64, strlen(b64), &out), 0);
        assert_int_equal(eph_redactor_finish(&r, &out), 0);
        assert_string_equal(out.data, "auth [REDACTED] and [REDACTED] and [REDACTED]");
        eph_redactor_release(&r);
        eph_buf_release(&out);
    }
}

/* A long stream with values at random places, in random pieces: the same as in one piece, and
 * no value left in it. */
static void test_random(void **state)
{
    static const char *const v[] = {"Zq9-credential-Zq9", "Zq9"};
    char in[20000];
    size_t len = 0;
    srand(7);
    while (len < sizeof(in) - 64) {
        int r = rand() % 10;
        const char *piece = r == 0 ? v[0] : r == 1 ? v[1] : r == 2 ? "Zq9-cred" : "abcZ q9-";
        size_t pl = strlen(piece);
        memcpy(in + len, piece, pl);
        len += pl;
    }
    in[len] = '\0';
    size_t whole = len;
    char *ref = redact_split(v, 2, in, &whole, 1);
    assert_null(strstr(ref, "Zq9"));
    for (int round = 0; round < 20; round++) {
        size_t sizes[8];
        for (size_t i = 0; i < 8; i++)
            sizes[i] = 1 + (size_t)(rand() % 40);
        char *got = redact_split(v, 2, in, sizes, 8);
        assert_string_equal(got, ref);
        free(got);
    }
    free(ref);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_redact),           cmocka_unit_test(test_longest_wins),
        cmocka_unit_test(test_no_values),        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_random),           cmocka_unit_test(test_every_form),
        cmocka_unit_test(test_form_near_misses), cmocka_unit_test(test_base64_alignments),
        cmocka_unit_test(test_many_values),      cmocka_unit_test(test_header_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
