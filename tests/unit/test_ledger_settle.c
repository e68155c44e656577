/* The final split of a run's money (src/ledger/settle.c): every settlement path writes what it
 * returns, so its invariants are the ledger's: charged + released = reserved, charged = model +
 * web + compute, no part negative, and the reservation never exceeded, whatever was measured. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "ledger/budget.h"
#include "ledger/settle.h"

static void check_invariants(int64_t reserved, const struct eph_settlement *s)
{
    int64_t r = reserved < 0 ? 0 : reserved;
    assert_true(s->model >= 0 && s->web >= 0 && s->compute >= 0);
    assert_int_equal(s->charged, s->model + s->web + s->compute);
    assert_int_equal(s->charged + s->released, r);
    assert_true(s->charged <= r);
    assert_true(s->released >= 0);
}

static void test_within_the_reservation_nothing_is_cut(void **state)
{
    struct eph_settlement s;
    eph_ledger_split(1000, 300, 200, 100, &s);
    assert_int_equal(s.model, 300);
    assert_int_equal(s.web, 200);
    assert_int_equal(s.compute, 100);
    assert_int_equal(s.charged, 600);
    assert_int_equal(s.released, 400);
    assert_false(s.capped);
    check_invariants(1000, &s);
}

static void test_cut_in_order_model_web_compute(void **state)
{
    struct eph_settlement s;
    /* Compute gets what model and web leave. */
    eph_ledger_split(1000, 600, 300, 500, &s);
    assert_int_equal(s.model, 600);
    assert_int_equal(s.web, 300);
    assert_int_equal(s.compute, 100);
    assert_int_equal(s.released, 0);
    assert_true(s.capped);
    check_invariants(1000, &s);
    /* Web gets what the model leaves, compute nothing. */
    eph_ledger_split(1000, 900, 300, 50, &s);
    assert_int_equal(s.web, 100);
    assert_int_equal(s.compute, 0);
    assert_true(s.capped);
    check_invariants(1000, &s);
    /* A model charge above the reservation (a provider past its bound) is cut to it. */
    eph_ledger_split(1000, 5000, 1, 1, &s);
    assert_int_equal(s.model, 1000);
    assert_int_equal(s.web, 0);
    assert_int_equal(s.compute, 0);
    check_invariants(1000, &s);
}

static void test_negative_and_extreme_inputs(void **state)
{
    struct eph_settlement s;
    eph_ledger_split(1000, -5, -7, -9, &s); /* never a credit */
    assert_int_equal(s.charged, 0);
    assert_int_equal(s.released, 1000);
    check_invariants(1000, &s);
    eph_ledger_split(-1, 10, 10, 10, &s); /* a negative reservation is none */
    assert_int_equal(s.charged, 0);
    assert_int_equal(s.released, 0);
    check_invariants(-1, &s);
    eph_ledger_split(INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX, &s); /* no overflow */
    assert_int_equal(s.model, INT64_MAX);
    check_invariants(INT64_MAX, &s);
}

/* The budget's settlement is the same split of what the budget measured. */
static void test_budget_settles_through_the_split(void **state)
{
    struct eph_budget b;
    eph_budget_init(&b, 10000, 1000); /* 1000 micros per sandbox-second */
    bool capped;
    assert_int_equal(eph_budget_charge_web(&b, 0, 2500, &capped), 2500);
    b.model = 4000; /* as charged by attempts */
    eph_budget_sandbox_started(&b, 0);
    eph_budget_sandbox_stopped(&b, 10ull * 1000000000ull); /* 10 s: 10000 micros measured */
    int64_t m, w, c, charged, released;
    eph_budget_settle(&b, 10ull * 1000000000ull, &m, &w, &c, &charged, &released);
    struct eph_settlement s;
    eph_ledger_split(10000, 4000, 2500, 10000, &s);
    assert_int_equal(m, s.model);
    assert_int_equal(w, s.web);
    assert_int_equal(c, s.compute);
    assert_int_equal(c, 3500);
    assert_int_equal(charged, s.charged);
    assert_int_equal(released, s.released);
}

#define RANDOM_SPLITS 100000

static void test_property_random_splits(void **state)
{
    srand(7);
    for (int i = 0; i < RANDOM_SPLITS; i++) {
        int64_t reserved = (int64_t)(rand() % 20000) - 100;
        int64_t m = (int64_t)(rand() % 20000) - 100, w = (int64_t)(rand() % 20000) - 100,
                c = (int64_t)(rand() % 20000) - 100;
        struct eph_settlement s;
        eph_ledger_split(reserved, m, w, c, &s);
        check_invariants(reserved, &s);
        /* Nothing is charged above what was measured, and a cut is said. */
        assert_true(s.model <= (m < 0 ? 0 : m) && s.web <= (w < 0 ? 0 : w) &&
                    s.compute <= (c < 0 ? 0 : c));
        bool cut =
            s.model < (m < 0 ? 0 : m) || s.web < (w < 0 ? 0 : w) || s.compute < (c < 0 ? 0 : c);
        assert_int_equal(cut, s.capped);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_within_the_reservation_nothing_is_cut),
        cmocka_unit_test(test_cut_in_order_model_web_compute),
        cmocka_unit_test(test_negative_and_extreme_inputs),
        cmocka_unit_test(test_budget_settles_through_the_split),
        cmocka_unit_test(test_property_random_splits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
