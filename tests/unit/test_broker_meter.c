/* Metering inside the hard limit (docs/MONEY.md, docs/BROKER.md): the fee checked before sending,
 * bytes charged as they flow, the transfer cut at the exact byte where the budget ends, charged <=
 * reserved. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "broker/meter.h"

#define MIB 1048576u

static void test_bytes_cost(void **state)
{
    assert_int_equal(eph_meter_bytes_cost(0, 50), 0);
    assert_int_equal(eph_meter_bytes_cost(1, 50), 1); /* rounded up */
    assert_int_equal(eph_meter_bytes_cost(MIB, 50), 50);
    assert_int_equal(eph_meter_bytes_cost(MIB + 1, 50), 51);
    assert_int_equal(eph_meter_bytes_cost(20971, 50), 1); /* 20971 * 50 < 2^20 */
    assert_int_equal(eph_meter_bytes_cost(20972, 50), 2); /* 20972 * 50 > 2^20 */
    assert_int_equal(eph_meter_bytes_cost(UINT64_MAX, UINT64_MAX), INT64_MAX);
    assert_int_equal(eph_meter_bytes_cost(123456789, 0), 0);
}

/* The fee must fit: refused with nothing charged when it does not. */
static void test_fee(void **state)
{
    struct eph_budget b;
    struct eph_meter m;
    eph_budget_init(&b, 150, 0);
    eph_meter_init(&m, 100, 50);
    assert_int_equal(eph_meter_start(&m, &b, 0), 0);
    assert_int_equal(b.web, 100);
    assert_int_equal(eph_meter_start(&m, &b, 0), 0); /* once */
    assert_int_equal(b.web, 100);
    struct eph_meter m2;
    eph_meter_init(&m2, 100, 50);
    assert_int_equal(eph_meter_start(&m2, &b, 0), -EDQUOT);
    assert_true(m2.exhausted);
    assert_int_equal(b.web, 100);
}

/* Many small pieces cost what one piece costs, and the cut is at the exact byte. */
static void test_cut_at_the_byte(void **state)
{
    struct eph_budget b;
    struct eph_meter m;
    /* 100 fee + 10 micros of bytes at 50 per MiB: 10 * 2^20 / 50 = 209715.2 -> 209715 bytes. */
    eph_budget_init(&b, 110, 0);
    eph_meter_init(&m, 100, 50);
    assert_int_equal(eph_meter_start(&m, &b, 0), 0);
    size_t total = 0, got;
    do {
        got = eph_meter_take(&m, &b, 0, 1000);
        total += got;
    } while (got == 1000);
    assert_true(m.exhausted);
    assert_int_equal(total, 209715);
    assert_int_equal(m.bytes, 209715);
    assert_int_equal(b.web, 110);
    assert_int_equal(m.charged, 110);
    assert_true(b.web <= b.reserved);
    assert_false(b.capped);
    /* Nothing more passes. */
    assert_int_equal(eph_meter_take(&m, &b, 0, 1), 0);
    /* One piece of the same size gives the same answer. */
    eph_budget_init(&b, 110, 0);
    eph_meter_init(&m, 100, 50);
    assert_int_equal(eph_meter_start(&m, &b, 0), 0);
    assert_int_equal(eph_meter_take(&m, &b, 0, 10 * MIB), 209715);
    assert_int_equal(b.web, 110);
}

/* Compute accrues too: the meter sees what is left now, never more. */
static void test_with_compute(void **state)
{
    struct eph_budget b;
    struct eph_meter m;
    eph_budget_init(&b, 1000, 100); /* 100 micros per second of sandbox */
    eph_budget_sandbox_started(&b, 0);
    eph_meter_init(&m, 0, 1000);
    /* After 5 s, 500 are compute: 500 left buy 500 * 2^20 / 1000 bytes. */
    uint64_t t = 5000000000ull;
    size_t k = eph_meter_take(&m, &b, t, 100 * MIB);
    assert_int_equal(k, (size_t)(500ull * MIB / 1000));
    assert_true(m.exhausted);
    int64_t model, web, compute, charged, released;
    eph_budget_settle(&b, t, &model, &web, &compute, &charged, &released);
    assert_true(charged <= 1000);
    assert_int_equal(charged + released, 1000);
    assert_int_equal(web, 500);
}

/* A free byte price meters nothing and never cuts. */
static void test_free_bytes(void **state)
{
    struct eph_budget b;
    struct eph_meter m;
    eph_budget_init(&b, 100, 0);
    eph_meter_init(&m, 100, 0);
    assert_int_equal(eph_meter_start(&m, &b, 0), 0);
    assert_int_equal(eph_meter_take(&m, &b, 0, 50 * MIB), 50 * MIB);
    assert_false(m.exhausted);
    assert_int_equal(b.web, 100);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bytes_cost),      cmocka_unit_test(test_fee),
        cmocka_unit_test(test_cut_at_the_byte), cmocka_unit_test(test_with_compute),
        cmocka_unit_test(test_free_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
