/* The streaming redactor (SPEC 7): every credential value an upstream echoes becomes [REDACTED]
 * before a byte reaches the sandbox, whatever the split of the stream into reads. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

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
    const char *many[EPH_REDACT_MAX_VALUES + 1];
    for (size_t i = 0; i <= EPH_REDACT_MAX_VALUES; i++)
        many[i] = "x";
    assert_int_equal(eph_redactor_init(&r, many, EPH_REDACT_MAX_VALUES + 1), -EINVAL);
    char *big = malloc(EPH_REDACT_MAX_VALUE + 2);
    memset(big, 'k', EPH_REDACT_MAX_VALUE + 1);
    big[EPH_REDACT_MAX_VALUE + 1] = '\0';
    const char *one[] = {big};
    assert_int_equal(eph_redactor_init(&r, one, 1), -EINVAL);
    free(big);
    /* The output's cap is reported, not overrun. */
    static const char *const v[] = {"secret"};
    struct eph_buf out;
    eph_buf_init(&out, 8);
    assert_int_equal(eph_redactor_init(&r, v, 1), 0);
    assert_int_equal(eph_redactor_feed(&r, "a secret", 8, &out), -EMSGSIZE);
    eph_redactor_release(&r);
    eph_buf_release(&out);
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
        cmocka_unit_test(test_redact),    cmocka_unit_test(test_longest_wins),
        cmocka_unit_test(test_no_values), cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
