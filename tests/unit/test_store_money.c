/* The store's running balance, the overflow rule, run leases (claim, renewal as the compute
 * checkpoint, expiry, settlement exactly once by another node) and usage kept, against SQLite or,
 * under tests/blackbox/store_postgres.sh, PostgreSQL. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/clock.h"
#include "common/id.h"
#include "store/store.h"
#include "store_fixture.h"

static int setup(void **state)
{
    struct store_fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    store_fixture_setup(f, "storemoney");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct store_fixture *f = *state;
    store_fixture_teardown(f);
    free(f);
    return 0;
}

static void make_run(struct eph_run *r, const char *org, int64_t reserve)
{
    eph_run_init(r);
    assert_int_equal(eph_id_hex("run_", 16, r->id, sizeof(r->id)), 0);
    snprintf(r->org_id, sizeof(r->org_id), "%s", org);
    r->status = EPH_RUN_QUEUED;
    r->model = strdup("m");
    r->prompt = strdup("p");
    r->timeout_seconds = 60;
    r->created_at_ms = eph_clock_real_ms();
    r->cost.reserved_micros = reserve;
}

/* The running totals agree with the ledger they summarise. */
static void check_totals(struct store_fixture *f)
{
    struct eph_balance b;
    int64_t cr, rs, ch, rl;
    assert_int_equal(f->st->ops->balance(f->st, f->org, &b), 0);
    assert_int_equal(f->st->ops->ledger_totals(f->st, f->org, &cr, &rs, &ch, &rl), 0);
    assert_int_equal(b.balance_micros, cr - ch);
    assert_int_equal(b.reserved_micros, rs - ch - rl);
    assert_int_equal(b.available_micros, b.balance_micros - b.reserved_micros);
}

static void settle(struct eph_store *st, struct eph_run *r, int64_t compute, int64_t lease_cut,
                   int expect)
{
    r->status = EPH_RUN_FAILED;
    r->finished_at_ms = eph_clock_real_ms();
    r->cost.model_micros = 0;
    r->cost.web_micros = 0;
    r->cost.compute_micros = compute;
    r->cost.charged_micros = compute;
    r->cost.released_micros = r->cost.reserved_micros - compute;
    struct eph_run_final fin = {.run = r, .lease_expired_before_ms = lease_cut};
    assert_int_equal(st->ops->run_finish(st, &fin), expect);
}

static void test_running_balance_follows_the_ledger(void **state)
{
    struct store_fixture *f = *state;
    struct eph_store *st = f->st;
    check_totals(f);
    assert_int_equal(st->ops->credit_add(st, f->org, 2500), 0);
    struct eph_run r[3];
    for (int i = 0; i < 3; i++) {
        make_run(&r[i], f->org, 10000);
        assert_int_equal(st->ops->run_insert(st, &r[i], NULL), 0);
        check_totals(f);
    }
    settle(st, &r[0], 1234, 0, 0);
    settle(st, &r[1], 0, 0, 0);
    check_totals(f);
    struct eph_balance b;
    assert_int_equal(st->ops->balance(st, f->org, &b), 0);
    assert_int_equal(b.balance_micros, 102500 - 1234);
    assert_int_equal(b.reserved_micros, 10000);
    for (int i = 0; i < 3; i++)
        eph_run_release(&r[i]);
    /* An unknown org has no balance, rather than a zero one. */
    assert_int_equal(st->ops->balance(st, "org_nosuch", &b), -ENOENT);
    assert_int_equal(st->ops->credit_add(st, "org_nosuch", 5), -ENOENT);
}

static void test_credit_near_2_63_does_not_lock_the_org_out(void **state)
{
    struct store_fixture *f = *state;
    struct eph_store *st = f->st;
    /* Up to the largest total 64 bits hold: accepted. */
    assert_int_equal(st->ops->credit_add(st, f->org, INT64_MAX - 100000), 0);
    struct eph_balance b;
    assert_int_equal(st->ops->balance(st, f->org, &b), 0);
    assert_int_equal(b.balance_micros, INT64_MAX);
    /* One more micro would overflow: refused, nothing written. */
    assert_int_equal(st->ops->credit_add(st, f->org, 1), -EOVERFLOW);
    assert_int_equal(st->ops->balance(st, f->org, &b), 0);
    assert_int_equal(b.balance_micros, INT64_MAX);
    /* The org still works: a run reserves and settles. */
    struct eph_run r;
    make_run(&r, f->org, 5000);
    assert_int_equal(st->ops->run_insert(st, &r, NULL), 0);
    settle(st, &r, 100, 0, 0);
    assert_int_equal(st->ops->balance(st, f->org, &b), 0);
    assert_int_equal(b.balance_micros, INT64_MAX - 100);
    assert_int_equal(b.reserved_micros, 0);
    eph_run_release(&r);
}

static void test_lease_claim_renew_and_checkpoint(void **state)
{
    struct store_fixture *f = *state;
    struct eph_store *st = f->st;
    struct eph_run r;
    make_run(&r, f->org, 10000);
    assert_int_equal(st->ops->run_insert(st, &r, NULL), 0);
    int64_t now = eph_clock_real_ms();
    /* Renewing an unclaimed run is refused; one node claims it, the other cannot. */
    assert_int_equal(st->ops->run_renew(st, r.id, "node-a", now + 30000, 0), -ESTALE);
    assert_int_equal(st->ops->run_claim(st, r.id, "node-a", now + 30000), 0);
    assert_int_equal(st->ops->run_claim(st, r.id, "node-b", now + 30000), -EALREADY);
    assert_int_equal(st->ops->run_renew(st, r.id, "node-b", now + 30000, 0), -ESTALE);
    /* The renewal records compute; a lower figure never lowers it; the reservation caps it. */
    assert_int_equal(st->ops->run_renew(st, r.id, "node-a", now + 30000, 700), 0);
    assert_int_equal(st->ops->run_renew(st, r.id, "node-a", now + 30000, 300), 0);
    struct eph_run got;
    assert_int_equal(st->ops->run_get(st, r.id, NULL, &got), 0);
    assert_int_equal(got.cost.compute_micros, 700);
    assert_string_equal(got.node_id, "node-a");
    assert_int_equal(got.lease_expires_at_ms, now + 30000);
    eph_run_release(&got);
    assert_int_equal(st->ops->run_renew(st, r.id, "node-a", now + 30000, 999999), 0);
    assert_int_equal(st->ops->run_get(st, r.id, NULL, &got), 0);
    assert_int_equal(got.cost.compute_micros, 10000);
    eph_run_release(&got);
    eph_run_release(&r);
}

static int collect(const struct eph_run *r, void *ctx)
{
    char *ids = ctx;
    strcat(ids, r->id);
    strcat(ids, " ");
    return 0;
}

static void test_expired_lease_settled_exactly_once(void **state)
{
    struct store_fixture *f = *state;
    struct eph_store *st = f->st;
    struct eph_run r, live;
    make_run(&r, f->org, 10000);
    make_run(&live, f->org, 10000);
    assert_int_equal(st->ops->run_insert(st, &r, NULL), 0);
    assert_int_equal(st->ops->run_insert(st, &live, NULL), 0);
    int64_t now = eph_clock_real_ms();
    assert_int_equal(st->ops->run_claim(st, r.id, "dead", now - 1000), 0);
    assert_int_equal(st->ops->run_claim(st, live.id, "alive", now + 60000), 0);
    assert_int_equal(st->ops->run_renew(st, r.id, "dead", now - 1000, 420), 0);
    char ids[256] = "";
    assert_int_equal(st->ops->runs_lease_expired(st, now, collect, ids), 0);
    assert_non_null(strstr(ids, r.id));
    assert_null(strstr(ids, live.id));
    /* A node settling the live run as lost is refused: its lease has not expired. */
    settle(st, &live, 0, now, -EALREADY);
    /* Two nodes race to settle the lost one: exactly one wins. */
    struct eph_run copy;
    assert_int_equal(st->ops->run_get(st, r.id, NULL, &copy), 0);
    assert_int_equal(copy.cost.compute_micros, 420); /* the checkpoint */
    settle(st, &r, 420, now, 0);
    settle(st, &copy, 420, now, -EALREADY);
    /* The dead node, back, cannot renew or settle it. */
    assert_int_equal(st->ops->run_renew(st, r.id, "dead", now + 30000, 500), -ESTALE);
    settle(st, &r, 500, 0, -EALREADY);
    int64_t cr, rs, ch, rl;
    assert_int_equal(st->ops->ledger_totals(st, f->org, &cr, &rs, &ch, &rl), 0);
    assert_int_equal(ch, 420);
    assert_int_equal(rl, 10000 - 420);
    check_totals(f);
    ids[0] = '\0';
    assert_int_equal(st->ops->runs_lease_expired(st, now, collect, ids), 0);
    assert_string_equal(ids, "");
    eph_run_release(&r);
    eph_run_release(&live);
    eph_run_release(&copy);
}

/* Calls and attempts are kept apart through progress and settlement: a retried call counts once
 * in model_calls and once per request in model_attempts. */
static void test_calls_and_attempts_kept_apart(void **state)
{
    struct store_fixture *f = *state;
    struct eph_store *st = f->st;
    struct eph_run r, got;
    make_run(&r, f->org, 10000);
    assert_int_equal(st->ops->run_insert(st, &r, NULL), 0);
    r.usage.model_calls = 1;
    r.usage.model_attempts = 3;
    assert_int_equal(st->ops->run_progress(st, &r), 0);
    assert_int_equal(st->ops->run_get(st, r.id, NULL, &got), 0);
    assert_int_equal(got.usage.model_calls, 1);
    assert_int_equal(got.usage.model_attempts, 3);
    eph_run_release(&got);
    r.usage.model_calls = 2;
    r.usage.model_attempts = 5;
    settle(st, &r, 100, 0, 0);
    assert_int_equal(st->ops->run_get(st, r.id, NULL, &got), 0);
    assert_int_equal(got.usage.model_calls, 2);
    assert_int_equal(got.usage.model_attempts, 5);
    eph_run_release(&got);
    eph_run_release(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_running_balance_follows_the_ledger, setup, teardown),
        cmocka_unit_test_setup_teardown(test_credit_near_2_63_does_not_lock_the_org_out, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_lease_claim_renew_and_checkpoint, setup, teardown),
        cmocka_unit_test_setup_teardown(test_expired_lease_settled_exactly_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_calls_and_attempts_kept_apart, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
