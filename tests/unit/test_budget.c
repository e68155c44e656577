/* The hard limit (docs/MONEY.md, docs/AGENT.md): pre-authorisation of each model attempt, how an
 * attempt is charged, the compute deadline, prices per token class, saturating counts, and a
 * property test: over 100 000 random runs of attempts, cuts, usages, prices, compute and web
 * traffic, what a provider can bill never exceeds the reservation, the charge never understates it,
 * and the settlement adds up; and the budget shared between threads: web traffic charged from
 * several threads while another authorises and charges model attempts and compute. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ledger/budget.h"

#define SEC 1000000000ull

/* The budget as seen now (its fields are read under its lock only). */
static struct eph_budget_view field(struct eph_budget *b)
{
    struct eph_budget_view v;
    eph_budget_read(b, 0, &v);
    return v;
}

static void test_authorise_lowers_max_tokens(void **state)
{
    struct eph_budget b;
    struct eph_price p = {50000, 50000, 200000};
    eph_budget_init(&b, 1000, 0);
    uint32_t max = 100000;
    /* 1000 micros: input 10000 tokens = 500, leaves 500 micros = 2500 output tokens. */
    assert_int_equal(eph_budget_authorise(&b, 0, 10000, 0, &p, 16, &max), 0);
    assert_int_equal(max, 2500);
    assert_int_equal(field(&b).earmark, 1000);
    assert_int_equal(eph_budget_available(&b, 0), 0);
    /* A max_tokens that fits is left alone. */
    eph_budget_init(&b, 1000000, 0);
    max = 100;
    assert_int_equal(eph_budget_authorise(&b, 0, 10000, 0, &p, 16, &max), 0);
    assert_int_equal(max, 100);
    assert_int_equal(field(&b).earmark, 520);
}

static void test_authorise_prices_input_at_the_dearest_class(void **state)
{
    struct eph_budget b;
    /* input $1, cache reads $0.10, output $2, cache writes $1.25 and $2 per Mtok: any input
     * token may turn out to be a 1-hour cache write, so the bound prices them all at $2. */
    struct eph_price p = {1000000, 100000, 2000000, 1250000, 2000000};
    assert_int_equal(eph_price_input_max(&p), 2000000);
    assert_int_equal(eph_price_worst_case(&p, 1000, 500), 3000);
    eph_budget_init(&b, 3000, 0);
    uint32_t max = 500;
    assert_int_equal(eph_budget_authorise(&b, 0, 1000, 0, &p, 16, &max), 0);
    assert_int_equal(max, 500);
    assert_int_equal(field(&b).earmark, 3000);
    eph_budget_init(&b, 2999, 0);
    max = 500;
    assert_int_equal(eph_budget_authorise(&b, 0, 1000, 0, &p, 16, &max), 0);
    assert_int_equal(max, 499);
}

static void test_authorise_leaves_compute_for_the_attempt(void **state)
{
    struct eph_budget b;
    struct eph_price p = {0, 0, 1000000}; /* output only: 1 micro a token */
    eph_budget_init(&b, 10000, 100);      /* 100 micros per sandbox-second */
    eph_budget_sandbox_started(&b, 0);
    uint32_t max = 100000;
    /* 20 s of the attempt's compute (2000 micros) stays out of the worst case. */
    assert_int_equal(eph_budget_authorise(&b, 0, 0, 20 * SEC, &p, 16, &max), 0);
    assert_int_equal(max, 8000);
    assert_int_equal(field(&b).earmark, 8000);
    /* so the attempt has those 20 s before compute would exhaust the budget */
    assert_int_equal(eph_budget_compute_deadline(&b), 20 * SEC);
    /* An attempt that may take very long: at most half of what is left is set aside. */
    max = 100000;
    assert_int_equal(eph_budget_authorise(&b, 0, 0, 1000 * SEC, &p, 16, &max), 0);
    assert_int_equal(max, 5000);
    /* No sandbox yet, no compute during the attempt: nothing set aside. */
    eph_budget_init(&b, 10000, 100);
    max = 100000;
    assert_int_equal(eph_budget_authorise(&b, 0, 0, 1000 * SEC, &p, 16, &max), 0);
    assert_int_equal(max, 10000);
}

static void test_authorise_refuses_when_nothing_fits(void **state)
{
    struct eph_budget b;
    struct eph_price p = {50000, 50000, 200000};
    eph_budget_init(&b, 10, 0);
    uint32_t max = 1024;
    /* Input alone (1000 tokens = 50 micros) is over the 10 left. */
    assert_int_equal(eph_budget_authorise(&b, 0, 1000, 0, &p, 16, &max), -EDQUOT);
    assert_int_equal(field(&b).earmark, 0);
    assert_int_equal(max, 1024);
    eph_budget_init(&b, 51, 0);
    /* 1 micro left after input = 5 output tokens, below the minimum of 16. */
    assert_int_equal(eph_budget_authorise(&b, 0, 1000, 0, &p, 16, &max), -EDQUOT);
    /* An absurd bound does not wrap into something that fits. */
    eph_budget_init(&b, INT64_MAX, 0);
    struct eph_price dear = {UINT64_MAX, 0, UINT64_MAX};
    assert_int_equal(eph_budget_authorise(&b, 0, UINT64_MAX, 0, &dear, 16, &max), -EDQUOT);
}

static void test_charge_attempt_kinds(void **state)
{
    struct eph_budget b;
    struct eph_price p = {50000, 5000, 200000};
    struct eph_attempt_cost c;
    eph_budget_init(&b, 100000, 0);
    uint32_t max = 1024;
    /* worst case: 1000 x 0.05 + 1024 x 0.2 = 254.8 -> 255 */
    assert_int_equal(eph_budget_authorise(&b, 0, 1000, 0, &p, 16, &max), 0);
    assert_int_equal(field(&b).earmark, 255);
    /* The reported usage is charged, not the earmark. */
    struct eph_token_usage u = {
        .input_tokens = 600, .cached_input_tokens = 400, .output_tokens = 100};
    assert_int_equal(eph_budget_charge_attempt(&b, 0, EPH_CHARGE_USAGE, &u, &p, &c), 52);
    assert_int_equal(c.earmark, 255);
    assert_false(c.capped);
    assert_false(c.above_bound);
    assert_int_equal(field(&b).earmark, 0);
    assert_int_equal(field(&b).model, 52);
    /* No usage but the provider may bill: the earmark. */
    assert_int_equal(eph_budget_authorise(&b, 0, 1000, 0, &p, 16, &max), 0);
    assert_int_equal(eph_budget_charge_attempt(&b, 0, EPH_CHARGE_EARMARK, NULL, &p, &c), 255);
    assert_int_equal(field(&b).model, 307);
    /* An HTTP error: nothing, even with a usage in hand. */
    assert_int_equal(eph_budget_authorise(&b, 0, 1000, 0, &p, 16, &max), 0);
    assert_int_equal(eph_budget_charge_attempt(&b, 0, EPH_CHARGE_NOTHING, &u, &p, &c), 0);
    assert_int_equal(field(&b).model, 307);
    assert_int_equal(field(&b).earmark, 0);
    /* A usage above the bound is flagged and charged up to what is left. */
    assert_int_equal(eph_budget_authorise(&b, 0, 1000, 0, &p, 16, &max), 0);
    struct eph_token_usage huge = {.input_tokens = 1000000000000ull,
                                   .output_tokens = 1000000000000ull};
    assert_int_equal(eph_budget_charge_attempt(&b, 0, EPH_CHARGE_USAGE, &huge, &p, &c),
                     100000 - 307);
    assert_true(c.above_bound);
    assert_true(c.capped);
    assert_true(b.capped);
    assert_int_equal(eph_budget_available(&b, 0), 0);
}

static void test_cost_per_token_class(void **state)
{
    /* $3 in, $0.30 cache read, $15 out, $3.75 5-minute writes, $6 1-hour writes */
    struct eph_price p = {3000000, 300000, 15000000, 3750000, 6000000};
    struct eph_token_usage u = {.input_tokens = 1000,
                                .cached_input_tokens = 10000,
                                .cache_write_tokens = 2000,
                                .cache_write_1h_tokens = 1000,
                                .output_tokens = 500,
                                .reasoning_tokens = 400};
    /* 3000 + 3000 + 7500 + 6000 + 7500 micros; reasoning is inside output, not added. */
    assert_int_equal(eph_price_cost(&p, &u), 27000);
    struct eph_token_usage one = {.output_tokens = 1};
    assert_int_equal(eph_price_cost(&p, &one), 15);
    struct eph_price cheap = {1, 1, 1, 1, 1};
    assert_int_equal(eph_price_cost(&cheap, &one), 1); /* rounded up once */
    struct eph_token_usage max = {UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX, 0};
    struct eph_price dear = {UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX};
    assert_int_equal(eph_price_cost(&dear, &max), INT64_MAX); /* saturates, never wraps */
}

static void test_tokens_saturate(void **state)
{
    assert_int_equal(eph_tokens_add(1, 2), 3);
    assert_int_equal(eph_tokens_add(EPH_TOKENS_MAX, 1), EPH_TOKENS_MAX);
    assert_int_equal(eph_tokens_add(UINT64_MAX, UINT64_MAX), EPH_TOKENS_MAX);
    assert_int_equal(eph_tokens_add(EPH_TOKENS_MAX - 5, 5), EPH_TOKENS_MAX);
    assert_true((int64_t)eph_tokens_add(UINT64_MAX, 0) > 0);
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
    /* An attempt in flight earmarks 1200 of the 2400 (1 micro per output token). */
    struct eph_price one = {0, 0, 1000000};
    uint32_t max = 1200;
    assert_int_equal(eph_budget_authorise(&b, 5 * SEC, 0, 0, &one, 16, &max), 0);
    assert_int_equal(field(&b).earmark, 1200);
    assert_int_equal(eph_budget_compute_deadline(&b), 10 * SEC);
    eph_budget_sandbox_stopped(&b, 6 * SEC);
    assert_int_equal(eph_budget_compute(&b, 100 * SEC), 240);
}

static void test_compute_never_eats_the_earmark(void **state)
{
    struct eph_budget b;
    struct eph_price p = {0, 0, 1000000};
    eph_budget_init(&b, 10000, 1000); /* 1000 micros a second */
    eph_budget_sandbox_started(&b, 0);
    uint32_t max = 100000;
    assert_int_equal(eph_budget_authorise(&b, 0, 0, 2 * SEC, &p, 16, &max), 0);
    assert_int_equal(field(&b).earmark, 8000);
    /* The sandbox outlives the compute deadline (2 s) by far: compute stops at 2000... */
    assert_int_equal(eph_budget_compute(&b, 9 * SEC), 2000);
    /* ...so an attempt billed its whole worst case still fits, uncapped. */
    struct eph_attempt_cost c;
    struct eph_token_usage u = {.output_tokens = max};
    assert_int_equal(eph_budget_charge_attempt(&b, 9 * SEC, EPH_CHARGE_USAGE, &u, &p, &c), 8000);
    assert_false(c.capped);
    int64_t m, w, comp, charged, released;
    eph_budget_sandbox_stopped(&b, 9 * SEC);
    eph_budget_settle(&b, 9 * SEC, &m, &w, &comp, &charged, &released);
    assert_int_equal(charged, 10000);
    assert_int_equal(comp, 2000);
    assert_int_equal(released, 0);
}

static void test_web_charge_as_bytes_flow(void **state)
{
    struct eph_budget b;
    struct eph_price p = {0, 0, 1000000};
    bool capped;
    eph_budget_init(&b, 1000, 0);
    assert_int_equal(eph_budget_charge_web(&b, 0, -50, &capped), 0); /* never a credit */
    assert_false(capped);
    assert_int_equal(eph_budget_charge_web(&b, 0, 100, &capped), 100);
    uint32_t max = 100000;
    assert_int_equal(eph_budget_authorise(&b, 0, 0, 0, &p, 16, &max), 0);
    assert_int_equal(field(&b).earmark, 900);
    /* Traffic during an attempt cannot take the attempt's earmark. */
    assert_false(eph_budget_fits(&b, 0, 1));
    assert_true(eph_budget_fits(&b, 0, 0));
    assert_false(eph_budget_fits(&b, 0, -1));
    assert_int_equal(eph_budget_charge_web(&b, 0, 10, &capped), 0);
    assert_true(capped);
    struct eph_attempt_cost c;
    assert_int_equal(eph_budget_charge_attempt(&b, 0, EPH_CHARGE_NOTHING, NULL, &p, &c), 0);
    assert_int_equal(eph_budget_charge_web(&b, 0, INT64_MAX, &capped), 900);
    assert_true(capped);
    assert_int_equal(field(&b).web, 1000);
}

/* A small deterministic generator, so a failure can be replayed from its seed. */
static uint64_t rng_state;
static uint64_t rnd(uint64_t n)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return n ? (rng_state >> 17) % n : 0;
}

/* A usage the provider may bill for an attempt of that bound: input split among the classes,
 * never more than input_bound in all, output at most max_tokens. */
static struct eph_token_usage honest_usage(uint64_t input_bound, uint32_t max)
{
    struct eph_token_usage u = {0};
    uint64_t in = rnd(4) ? input_bound - rnd(input_bound / 2 + 1) : rnd(input_bound + 1);
    u.cached_input_tokens = rnd(in + 1);
    in -= u.cached_input_tokens;
    u.cache_write_tokens = rnd(in + 1);
    in -= u.cache_write_tokens;
    u.cache_write_1h_tokens = rnd(in + 1);
    in -= u.cache_write_1h_tokens;
    u.input_tokens = in;
    u.output_tokens = rnd(3) ? rnd((uint64_t)max + 1) : max;
    u.reasoning_tokens = rnd(u.output_tokens + 1);
    return u;
}

#define PROPERTY_RUNS 100000

static void test_property_provider_spend_within_reservation(void **state)
{
    uint64_t attempts = 0, cut = 0, lowered = 0, refused = 0;
    for (uint64_t seed = 1; seed <= PROPERTY_RUNS; seed++) {
        rng_state = seed;
        struct eph_budget b;
        int64_t reserved = rnd(5) == 0 ? (int64_t)rnd(100) + 1 : (int64_t)rnd(5000000) + 1;
        eph_budget_init(&b, reserved, rnd(4) ? rnd(10000) : 0);
        uint64_t now = rnd(1000) * 1000000ull;
        eph_budget_sandbox_started(&b, now);
        uint64_t in_price = rnd(20000000);
        struct eph_price p = {in_price, rnd(in_price + 1), rnd(80000000),
                              rnd(3) ? in_price + in_price / 4 : 0, rnd(3) ? 2 * in_price : 0};
        /* Some runs have a provider that reports past the bound it is assumed to respect: the
         * user's limit must hold all the same, and the event must say so. */
        bool liar = rnd(10) == 0;
        int64_t billable = 0; /* what the provider can bill for the run */
        int steps = (int)rnd(40);
        for (int i = 0; i < steps; i++) {
            now += rnd(3 * SEC);
            switch (rnd(3)) {
            case 0: {
                uint32_t asked = (uint32_t)rnd(100000) + 1, max = asked;
                uint64_t bound = rnd(8) ? rnd(200000) : rnd(UINT32_MAX);
                int rc = eph_budget_authorise(&b, now, bound, rnd(200) * SEC, &p, 16, &max);
                if (rc) {
                    assert_int_equal(rc, -EDQUOT);
                    assert_int_equal(field(&b).earmark, 0);
                    refused++;
                    break;
                }
                attempts++;
                lowered += max < asked;
                assert_true(max <= asked && max >= 16);
                assert_true(field(&b).earmark == eph_price_worst_case(&p, bound, max));
                assert_true(field(&b).model + field(&b).web + field(&b).earmark +
                                eph_budget_compute(&b, now) <=
                            reserved);
                /* The attempt is in flight until at most the compute deadline, and sometimes
                 * a little past it (the sandbox takes time to die). */
                uint64_t end = eph_budget_compute_deadline(&b);
                uint64_t t = now + rnd(10 * SEC);
                if (end != UINT64_MAX && t > end && rnd(4))
                    t = end > now ? end : now;
                now = t;
                struct eph_token_usage u = honest_usage(bound, max);
                enum eph_attempt_charge how;
                int64_t bill;
                switch (rnd(6)) {
                case 0: /* an HTTP error status: not billed */
                    how = EPH_CHARGE_NOTHING;
                    bill = 0;
                    break;
                case 1: /* cut after the request went out, no usage: billed, unknown */
                case 2: /* an answer without usage */
                    how = EPH_CHARGE_EARMARK;
                    bill = eph_price_cost(&p, &u);
                    cut++;
                    break;
                default:
                    how = EPH_CHARGE_USAGE;
                    if (liar && rnd(2)) {
                        u.input_tokens = eph_tokens_add(u.input_tokens, rnd(UINT32_MAX));
                        u.output_tokens = eph_tokens_add(u.output_tokens, rnd(UINT32_MAX));
                    }
                    bill = eph_price_cost(&p, &u);
                    break;
                }
                int64_t before = field(&b).model;
                struct eph_attempt_cost c;
                int64_t charged = eph_budget_charge_attempt(&b, now, how, &u, &p, &c);
                assert_int_equal(charged, field(&b).model - before);
                assert_int_equal(field(&b).earmark, 0);
                if (how == EPH_CHARGE_EARMARK || how == EPH_CHARGE_USAGE)
                    assert_true(bill <= c.earmark || c.above_bound);
                if (!c.above_bound) {
                    /* Within the bound: charged in full, never less than billed. */
                    assert_false(c.capped);
                    assert_true(charged >= bill);
                    if (how == EPH_CHARGE_USAGE)
                        assert_int_equal(charged, bill);
                }
                billable += bill;
                break;
            }
            case 1: {
                bool capped;
                int64_t before = field(&b).web;
                int64_t want = (int64_t)rnd(2000) - 100;
                int64_t got = eph_budget_charge_web(&b, now, want, &capped);
                assert_true(got >= 0 && got <= (want > 0 ? want : 0));
                assert_int_equal(field(&b).web - before, got);
                break;
            }
            default:
                break;
            }
            /* At every instant: nothing spent beyond the reservation, and (within the bound)
             * nothing the provider can bill beyond it either. */
            assert_true(field(&b).model >= 0 && field(&b).web >= 0 && field(&b).earmark == 0);
            assert_true(field(&b).model + field(&b).web + eph_budget_compute(&b, now) <= reserved);
            if (!liar)
                assert_true(billable + field(&b).web + eph_budget_compute(&b, now) <= reserved);
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
        if (!liar) {
            assert_true(billable + w + c <= reserved);
            assert_true(m >= billable);
        }
    }
    /* The generator reaches every case often, or the property says little. */
    assert_true(attempts > PROPERTY_RUNS);
    assert_true(cut > PROPERTY_RUNS / 10 && lowered > PROPERTY_RUNS / 10 &&
                refused > PROPERTY_RUNS / 10);
    printf("property: %d runs, %llu attempts (%llu cut or without usage, %llu lowered), %llu "
           "refused\n",
           PROPERTY_RUNS, (unsigned long long)attempts, (unsigned long long)cut,
           (unsigned long long)lowered, (unsigned long long)refused);
}

/* ---- shared between threads ---- */

#define WEB_THREADS 3
#define WEB_STEPS 200000
#define MODEL_STEPS 200000
#define SHARED_RESERVED 240000000

struct shared {
    struct eph_budget b;
    pthread_barrier_t go;   /* every thread starts at once */
    _Atomic uint64_t now;   /* the simulated clock, advanced by the model thread */
    atomic_int violations;  /* steps where the invariant did not hold */
    atomic_int cut_earmark; /* attempts authorised that could not be charged their earmark */
    int64_t web[WEB_THREADS];
    int64_t model;
    unsigned granted;
};

struct web_arg {
    struct shared *sh;
    unsigned i;
};

/* One step's observation, from one consistent view. */
static void check_view(struct shared *sh)
{
    struct eph_budget_view v;
    eph_budget_read(&sh->b, atomic_load(&sh->now), &v);
    if (v.model < 0 || v.web < 0 || v.earmark < 0 || v.compute < 0 || v.available < 0 ||
        v.model + v.web + v.earmark + v.compute > v.reserved ||
        v.model + v.web + v.earmark + v.compute + v.available != v.reserved)
        atomic_fetch_add(&sh->violations, 1);
}

static void *web_thread(void *p)
{
    struct web_arg *a = p;
    struct shared *sh = a->sh;
    uint64_t x = 0x9e3779b97f4a7c15ull * (a->i + 1);
    pthread_barrier_wait(&sh->go);
    for (unsigned n = 0; n < WEB_STEPS; n++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int64_t micros = (int64_t)(x % 500) + 1;
        uint64_t now = atomic_load(&sh->now);
        if (n % 2) { /* a fee: all or nothing */
            if (eph_budget_charge_web_all(&sh->b, now, micros))
                sh->web[a->i] += micros;
        } else { /* bytes: cut at what is left */
            bool capped;
            sh->web[a->i] += eph_budget_charge_web(&sh->b, now, micros, &capped);
        }
        check_view(sh);
    }
    return NULL;
}

static void *model_thread(void *p)
{
    struct shared *sh = p;
    struct eph_price price = {0, 0, 1000000}; /* a micro per output token */
    uint64_t x = 88172645463325252ull;
    pthread_barrier_wait(&sh->go);
    for (unsigned n = 0; n < MODEL_STEPS; n++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        uint64_t now = atomic_fetch_add(&sh->now, 1000000) + 1000000; /* a millisecond */
        uint32_t max = (uint32_t)(x % 2000) + 16;
        int rc = eph_budget_authorise(&sh->b, now, 0, SEC, &price, 16, &max);
        check_view(sh);
        if (rc)
            continue;
        sh->granted++;
        /* Billed its whole worst case: an authorisation is only granted when the earmark fits
         * beside every web charge made meanwhile, so it is charged whole, never cut. */
        struct eph_token_usage u = {.output_tokens = max};
        struct eph_attempt_cost c;
        int64_t got = eph_budget_charge_attempt(&sh->b, now, EPH_CHARGE_USAGE, &u, &price, &c);
        sh->model += got;
        if (c.capped || got != (int64_t)max)
            atomic_fetch_add(&sh->cut_earmark, 1);
        check_view(sh);
    }
    return NULL;
}

static void test_shared_between_threads(void **state)
{
    struct shared *sh = calloc(1, sizeof(*sh));
    assert_non_null(sh);
    eph_budget_init(&sh->b, SHARED_RESERVED, 1000); /* a micro per sandbox-millisecond */
    eph_budget_sandbox_started(&sh->b, 0);
    assert_int_equal(pthread_barrier_init(&sh->go, NULL, WEB_THREADS + 1), 0);
    pthread_t model, web[WEB_THREADS];
    struct web_arg args[WEB_THREADS];
    assert_int_equal(pthread_create(&model, NULL, model_thread, sh), 0);
    for (unsigned i = 0; i < WEB_THREADS; i++) {
        args[i] = (struct web_arg){.sh = sh, .i = i};
        assert_int_equal(pthread_create(&web[i], NULL, web_thread, &args[i]), 0);
    }
    pthread_join(model, NULL);
    int64_t web_sum = 0;
    for (unsigned i = 0; i < WEB_THREADS; i++) {
        pthread_join(web[i], NULL);
        web_sum += sh->web[i];
    }
    assert_int_equal(atomic_load(&sh->violations), 0);
    assert_int_equal(atomic_load(&sh->cut_earmark), 0);
    assert_true(sh->granted > 0);
    /* What each charge returned is what the budget holds: no charge lost or doubled. */
    uint64_t end = atomic_load(&sh->now);
    struct eph_budget_view v;
    eph_budget_read(&sh->b, end, &v);
    assert_int_equal(v.web, web_sum);
    assert_int_equal(v.model, sh->model);
    assert_int_equal(v.earmark, 0);
    assert_true(sh->model + web_sum + v.compute <= SHARED_RESERVED);
    int64_t m, w, comp, charged, released;
    eph_budget_sandbox_stopped(&sh->b, end);
    eph_budget_settle(&sh->b, end, &m, &w, &comp, &charged, &released);
    assert_int_equal(charged, sh->model + web_sum + comp);
    assert_int_equal(charged + released, SHARED_RESERVED);
    eph_budget_destroy(&sh->b);
    pthread_barrier_destroy(&sh->go);
    free(sh);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_authorise_lowers_max_tokens),
        cmocka_unit_test(test_authorise_prices_input_at_the_dearest_class),
        cmocka_unit_test(test_authorise_leaves_compute_for_the_attempt),
        cmocka_unit_test(test_authorise_refuses_when_nothing_fits),
        cmocka_unit_test(test_charge_attempt_kinds),
        cmocka_unit_test(test_cost_per_token_class),
        cmocka_unit_test(test_tokens_saturate),
        cmocka_unit_test(test_compute_deadline),
        cmocka_unit_test(test_compute_never_eats_the_earmark),
        cmocka_unit_test(test_web_charge_as_bytes_flow),
        cmocka_unit_test(test_property_provider_spend_within_reservation),
        cmocka_unit_test(test_shared_between_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
