/* Money arithmetic and its display form (docs/MONEY.md). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/money.h"

static void check_format(int64_t micros, const char *want)
{
    char out[EPH_MONEY_FMT_MAX];
    assert_string_equal(eph_money_format(micros, out), want);
}

static void test_format_spec_examples(void **state)
{
    check_format(40000, "$0.04");
    check_format(3530, "$0.00353");
    check_format(36470, "$0.03647");
    check_format(330, "$0.00033");
    check_format(0, "$0.00");
    check_format(3200, "$0.0032");
}

static void test_format_edges(void **state)
{
    check_format(1000000, "$1.00");
    check_format(100000000, "$100.00");
    check_format(1234567, "$1.23457"); /* the sixth decimal rounds half up */
    check_format(5, "$0.00001");
    check_format(4, "$0.00");
    check_format(10, "$0.00001");
    check_format(-3530, "-$0.00353");
    check_format(INT64_MAX, "$9223372036854.77581");
    check_format(INT64_MIN, "-$9223372036854.77581");
}

static void test_parse_dollars(void **state)
{
    int64_t v;
    assert_int_equal(eph_money_parse_dollars("0.04", &v), 0);
    assert_int_equal(v, 40000);
    assert_int_equal(eph_money_parse_dollars("$1", &v), 0);
    assert_int_equal(v, 1000000);
    assert_int_equal(eph_money_parse_dollars("12.5", &v), 0);
    assert_int_equal(v, 12500000);
    assert_int_equal(eph_money_parse_dollars("0.000001", &v), 0);
    assert_int_equal(v, 1);
    assert_int_equal(eph_money_parse_dollars("0.0000001", &v), -EINVAL);
    assert_int_equal(eph_money_parse_dollars("", &v), -EINVAL);
    assert_int_equal(eph_money_parse_dollars("1.", &v), -EINVAL);
    assert_int_equal(eph_money_parse_dollars("-1", &v), -EINVAL);
    assert_int_equal(eph_money_parse_dollars("1e3", &v), -EINVAL);
    assert_int_equal(eph_money_parse_dollars("99999999999999999999", &v), -EOVERFLOW);
}

static void test_token_cost_ceil(void **state)
{
    uint64_t a, b;
    /* 1536 input at $0.05/Mtok and 166 output at $0.20/Mtok: 76.8 + 33.2 = exactly 110. */
    assert_int_equal(eph_money_mtok_numerator(1536, 50000, &a), 0);
    assert_int_equal(eph_money_mtok_numerator(166, 200000, &b), 0);
    assert_int_equal(eph_money_ceil_mtok(a + b), 110);
    /* One token at any price costs at least one micro. */
    assert_int_equal(eph_money_mtok_numerator(1, 1, &a), 0);
    assert_int_equal(eph_money_ceil_mtok(a), 1);
    assert_int_equal(eph_money_ceil_mtok(0), 0);
    assert_int_equal(eph_money_ceil_mtok(1000000), 1);
    assert_int_equal(eph_money_ceil_mtok(1000001), 2);
    assert_int_equal(eph_money_mtok_numerator(UINT64_MAX, 2, &a), -EOVERFLOW);
}

static void test_compute_cost(void **state)
{
    assert_int_equal(eph_money_compute_cost(0, 240), 0);
    assert_int_equal(eph_money_compute_cost(1000000000, 240), 240);
    assert_int_equal(eph_money_compute_cost(1, 240), 1); /* rounded up */
    assert_int_equal(eph_money_compute_cost(13333333333ull, 240), 3200);
    assert_int_equal(eph_money_compute_cost(UINT64_MAX, UINT64_MAX), UINT64_MAX);
}

static void test_thousands(void **state)
{
    char out[32];
    assert_string_equal(eph_format_thousands(5214, out), "5,214");
    assert_string_equal(eph_format_thousands(0, out), "0");
    assert_string_equal(eph_format_thousands(999, out), "999");
    assert_string_equal(eph_format_thousands(1000, out), "1,000");
    assert_string_equal(eph_format_thousands(1234567890, out), "1,234,567,890");
}

/* "$X charged, $Y released" adds up to the budget shown, to the last digit. */
/* The parts of a charge as shown add up to the charge as shown: the example (45 + 35 shown
 * as $0.00005 + $0.00004 beside $0.00008), and every split of small totals into three parts. */
static void test_split_adds_up(void **state)
{
    int64_t shown[3];
    eph_money_split((int64_t[]){45, 35, 0}, 3, shown);
    assert_int_equal(shown[0] + shown[1] + shown[2], 80);
    assert_int_equal(shown[0], 50); /* the larger remainder first, then nothing is missing */
    assert_int_equal(shown[1], 30);
    eph_money_split((int64_t[]){330, 0, 3200}, 3, shown);
    assert_int_equal(shown[0], 330);
    assert_int_equal(shown[2], 3200);
    eph_money_split((int64_t[]){-5, 14, 0}, 3, shown);
    assert_int_equal(shown[0], 0);
    assert_int_equal(shown[1], 10);
    for (int64_t a = 0; a < 40; a++)
        for (int64_t b = 0; b < 40; b++)
            for (int64_t c = 0; c < 40; c += 3) {
                eph_money_split((int64_t[]){a, b, c}, 3, shown);
                char t[EPH_MONEY_FMT_MAX];
                int64_t whole;
                assert_int_equal(eph_money_parse_dollars(eph_money_format(a + b + c, t), &whole),
                                 0);
                if (shown[0] + shown[1] + shown[2] != whole)
                    fail_msg("%lld + %lld + %lld: shown %lld + %lld + %lld != %lld", (long long)a,
                             (long long)b, (long long)c, (long long)shown[0], (long long)shown[1],
                             (long long)shown[2], (long long)whole);
                for (int k = 0; k < 3; k++) {
                    int64_t part = k == 0 ? a : k == 1 ? b : c;
                    if (shown[k] % 10 || shown[k] < part - part % 10 ||
                        shown[k] > part - part % 10 + 10)
                        fail_msg("part %d of %lld shown as %lld", k, (long long)part,
                                 (long long)shown[k]);
                }
            }
}

static void test_rest_adds_up(void **state)
{
    char a[EPH_MONEY_FMT_MAX], b[EPH_MONEY_FMT_MAX];
    /* Rounded on its own, 5 micros charged of 10 shows $0.00001 + $0.00001 = $0.00002. */
    assert_string_equal(eph_money_format(5, a), "$0.00001");
    assert_string_equal(eph_money_format_rest(10, 5, b), "$0.00");
    assert_string_equal(eph_money_format_rest(40000, 3530, b), "$0.03647");
    assert_string_equal(eph_money_format_rest(40000, 0, b), "$0.04");
    assert_string_equal(eph_money_format_rest(40000, 40000, b), "$0.00");
    /* Every split of a few budgets: shown part + shown rest == shown total, in micros. */
    const int64_t totals[] = {1, 9, 10, 15, 40000, 123457, 999995};
    for (size_t t = 0; t < sizeof(totals) / sizeof(totals[0]); t++) {
        for (int64_t part = 0; part <= totals[t]; part += totals[t] > 2000 ? 997 : 1) {
            int64_t sum = 0;
            const char *shown[2] = {eph_money_format(part, a),
                                    eph_money_format_rest(totals[t], part, b)};
            for (int i = 0; i < 2; i++) {
                int64_t m;
                assert_int_equal(eph_money_parse_dollars(shown[i], &m), 0);
                sum += m;
            }
            char c[EPH_MONEY_FMT_MAX];
            int64_t whole;
            assert_int_equal(eph_money_parse_dollars(eph_money_format(totals[t], c), &whole), 0);
            if (sum != whole)
                fail_msg("%lld of %lld: %s + %s != %s", (long long)part, (long long)totals[t],
                         shown[0], shown[1], c);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_spec_examples), cmocka_unit_test(test_format_edges),
        cmocka_unit_test(test_parse_dollars),        cmocka_unit_test(test_token_cost_ceil),
        cmocka_unit_test(test_compute_cost),         cmocka_unit_test(test_rest_adds_up),
        cmocka_unit_test(test_split_adds_up),        cmocka_unit_test(test_thousands),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
