/* The hard limit (SPEC 4): planning, capping, the compute deadline, and a property test over many
 * random sequences of prices, usages, compute times and web charges. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ledger/budget.h"

#define SEC 1000000000ull

static void test_plan_lowers_max_tokens(void **state)
{
    struct eph_budget b;
    struct eph_price p = {50000, 50000, 200000};
    eph_budget_init(&b, 1000, 0);
    uint32_t max = 100000;
    /* 1000 micros: input 10000 tokens = 500, leaves 500 micros = 2500 output tokens. */
    assert_int_equal(eph_budget_plan_model_call(&b, 0, 10000, 0, &p, 16, &max), 0);
    assert_int_equal(max, 2500);
    assert_int_equal(b.earmark, 1000);
    assert_int_equal(eph_budget_available(&b, 0), 0);
}

static void test_plan_leaves_compute_for_the_call(void **state)
{
    struct eph_budget b;
    struct eph_price p = {0, 0, 1000000}; /* output only: 1 micro a token */
    eph_budget_init(&b, 10000, 100);      /* 100 micros per sandbox-second */
    eph_budget_sandbox_started(&b, 0);
    uint32_t max = 100000;
    /* 20 s of the call's compute (2000 micros) stays out of the worst case. */
    assert_int_equal(eph_budget_plan_model_call(&b, 0, 0, 20 * SEC, &p, 16, &max), 0);
    assert_int_equal(max, 8000);
    assert_int_equal(b.earmark, 8000);
    /* so the call has those 20 s before compute would exhaust the budget */
    assert_int_equal(eph_budget_compute_deadline(&b), 20 * SEC);
    /* A call that may take very long: at most half of what is left is set aside. */
    max = 100000;
    assert_int_equal(eph_budget_plan_model_call(&b, 0, 0, 1000 * SEC, &p, 16, &max), 0);
    assert_int_equal(max, 5000);
    /* No sandbox yet, no compute during the call: nothing set aside. */
    eph_budget_init(&b, 10000, 100);
    max = 100000;
    assert_int_equal(eph_budget_plan_model_call(&b, 0, 0, 1000 * SEC, &p, 16, &max), 0);
    assert_int_equal(max, 10000);
}

static void test_plan_refuses_when_nothing_fits(void **state)
{
    struct eph_budget b;
    struct eph_price p = {50000, 50000, 200000};
    eph_budget_init(&b, 10, 0);
    uint32_t max = 1024;
    /* Input alone (1000 tokens = 50 micros) is over the 10 left. */
    assert_int_equal(eph_budget_plan_model_call(&b, 0, 1000, 0, &p, 16, &max), -EDQUOT);
    eph_budget_init(&b, 51, 0);
    max = 1024;
    /* 1 micro left after input = 5 output tokens, below the minimum of 16. */
    assert_int_equal(eph_budget_plan_model_call(&b, 0, 1000, 0, &p, 16, &max), -EDQUOT);
}

static void test_charge_capped_at_reservation(void **state)
{
    struct eph_budget b;
    struct eph_price p = {50000, 50000, 200000};
    eph_budget_init(&b, 40000, 240);
    bool capped;
    int64_t c = eph_budget_charge_model_call(&b, 0, 1000000000, 0, 1000000000, &p, &capped);
    assert_true(capped);
    assert_int_equal(c, 40000);
    int64_t m, w, comp, charged, released;
    eph_budget_sandbox_started(&b, 0);
    eph_budget_settle(&b, 100 * SEC, &m, &w, &comp, &charged, &released);
    assert_int_equal(charged, 40000);
    assert_int_equal(released, 0);
    assert_int_equal(comp, 0);
}

static void test_missing_usage_charges_worst_case(void **state)
{
    struct eph_budget b;
    struct eph_price p = {50000, 50000, 200000};
    eph_budget_init(&b, 1000, 0);
    uint32_t max = 1024;
    /* 1000 input tokens = 50 micros, 1024 output tokens = 204.8: a worst case of 255. */
    assert_int_equal(eph_budget_plan_model_call(&b, 0, 1000, 0, &p, 16, &max), 0);
    assert_int_equal(b.earmark, 255);
    bool capped;
    assert_int_equal(eph_budget_charge_model_worst_case(&b, 0, 0, 0, 0, &p, &capped), 255);
    assert_false(capped);
    assert_int_equal(b.earmark, 0);
    assert_int_equal(b.model, 255);
    /* Usage reported by a failed earlier attempt is added to the worst case. */
    max = 1024;
    assert_int_equal(eph_budget_plan_model_call(&b, 0, 1000, 0, &p, 16, &max), 0);
    assert_int_equal(eph_budget_charge_model_worst_case(&b, 0, 1000, 0, 0, &p, &capped), 305);
    assert_int_equal(b.model, 560);
    /* And the sum is capped at what is left: the limit holds. */
    max = 1024;
    assert_int_equal(eph_budget_plan_model_call(&b, 0, 1000, 0, &p, 16, &max), 0);
    assert_int_equal(eph_budget_charge_model_worst_case(&b, 0, 100000, 0, 0, &p, &capped), 440);
    assert_true(capped);
    assert_int_equal(b.model, 1000);
}

static void test_compute_deadline(void **state)
{
    struct eph_budget b;
    eph_budget_init(&b, 2400, 240);
    assert_int_equal(eph_budget_compute_deadline(&b), UINT64_MAX);
    eph_budget_sandbox_started(&b, 5 * SEC);
    /* 2400 micros at 240 per second: 10 s after the start. */
    assert_int_equal(eph_budget_compute_deadline(&b), 15 * SEC);
    assert_int_equal(eph_budget_compute(&b, 15 * SEC), 2400);
    assert_int_equal(eph_budget_compute(&b, 20 * SEC), 2400); /* capped */
    b.earmark = 1200;
    assert_int_equal(eph_budget_compute_deadline(&b), 10 * SEC);
    eph_budget_sandbox_stopped(&b, 6 * SEC);
    assert_int_equal(eph_budget_compute(&b, 100 * SEC), 240);
}

/* A small deterministic generator, so a failure can be replayed from its seed. */
static uint64_t rng_state;
static uint64_t rnd(uint64_t n)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return n ? (rng_state >> 17) % n : 0;
}

static void test_property_random_sequences(void **state)
{
    for (uint64_t seed = 1; seed <= 20000; seed++) {
        rng_state = seed;
        struct eph_budget b;
        int64_t reserved = (int64_t)rnd(5) == 0 ? (int64_t)rnd(100) + 1 : (int64_t)rnd(5000000) + 1;
        eph_budget_init(&b, reserved, rnd(4) ? rnd(10000) : 0);
        uint64_t now = rnd(1000) * 1000000ull;
        eph_budget_sandbox_started(&b, now);
        struct eph_price p = {rnd(20000000), rnd(20000000), rnd(80000000)};
        int steps = (int)rnd(40);
        for (int i = 0; i < steps; i++) {
            now += rnd(3 * SEC);
            switch (rnd(3)) {
            case 0: {
                uint32_t max = (uint32_t)rnd(100000) + 1;
                uint64_t est = rnd(200000);
                int rc = eph_budget_plan_model_call(&b, now, est, rnd(200) * SEC, &p, 16, &max);
                if (rc == 0) {
                    assert_true(b.earmark <= reserved);
                    /* The model may report anything, including far more than asked. */
                    uint64_t in = rnd(4) ? est : rnd(UINT32_MAX);
                    uint64_t out = rnd(4) ? rnd(max + 1) : rnd(UINT32_MAX);
                    bool capped;
                    now += rnd(SEC);
                    if (rnd(5) == 0) /* no usage reported: the worst case */
                        eph_budget_charge_model_worst_case(&b, now, rnd(2) ? 0 : in, 0, 0, &p,
                                                           &capped);
                    else
                        eph_budget_charge_model_call(&b, now, in, rnd(1000), out, &p, &capped);
                }
                break;
            }
            case 1: {
                bool capped;
                eph_budget_charge_web(&b, now, (int64_t)rnd(2000), &capped);
                break;
            }
            default:
                break;
            }
            /* At every instant: nothing spent beyond the reservation. */
            assert_true(b.model >= 0 && b.web >= 0);
            assert_true(b.model + b.web + eph_budget_compute(&b, now) <= reserved);
            assert_true(eph_budget_available(&b, now) >= 0);
        }
        now += rnd(100 * SEC);
        eph_budget_sandbox_stopped(&b, now);
        int64_t m, w, c, charged, released;
        eph_budget_settle(&b, now + rnd(SEC), &m, &w, &c, &charged, &released);
        assert_true(charged <= reserved);
        assert_true(charged >= 0 && released >= 0);
        assert_int_equal(charged + released, reserved);
        assert_int_equal(charged, m + w + c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_lowers_max_tokens),
        cmocka_unit_test(test_plan_leaves_compute_for_the_call),
        cmocka_unit_test(test_plan_refuses_when_nothing_fits),
        cmocka_unit_test(test_charge_capped_at_reservation),
        cmocka_unit_test(test_missing_usage_charges_worst_case),
        cmocka_unit_test(test_compute_deadline),
        cmocka_unit_test(test_property_random_sequences),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
