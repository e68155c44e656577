/* The ledger in the SQLite store: reservation at creation, settlement at the end, derived
 * balances, no doubled entries, and concurrent reservations that cannot overdraw. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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
    store_fixture_setup(f, "ledger");
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
    r->shell = true;
    r->timeout_seconds = 120;
    r->created_at_ms = eph_clock_real_ms();
    r->cost.reserved_micros = reserve;
}

static void check_balance(struct store_fixture *f, int64_t balance, int64_t reserved,
                          int64_t available)
{
    struct eph_balance b;
    assert_int_equal(f->st->ops->balance(f->st, f->org, &b), 0);
    assert_int_equal(b.balance_micros, balance);
    assert_int_equal(b.reserved_micros, reserved);
    assert_int_equal(b.available_micros, available);
}

static void test_org_ensure_is_idempotent(void **state)
{
    struct store_fixture *f = *state;
    char again[48];
    bool created;
    assert_int_equal(f->st->ops->org_ensure(f->st, "acme", 100000, again, sizeof(again), &created),
                     0);
    assert_false(created);
    assert_string_equal(again, f->org);
    check_balance(f, 100000, 0, 100000); /* the credit was not added twice */
}

static void test_reserve_then_settle(void **state)
{
    struct store_fixture *f = *state;
    struct eph_run r;
    make_run(&r, f->org, 40000);
    assert_int_equal(f->st->ops->run_insert(f->st, &r, NULL), 0);
    check_balance(f, 100000, 40000, 60000);

    r.status = EPH_RUN_COMPLETED;
    r.finished_at_ms = eph_clock_real_ms();
    r.cost.model_micros = 330;
    r.cost.compute_micros = 3200;
    r.cost.charged_micros = 3530;
    r.cost.released_micros = 36470;
    struct eph_run_final fin = {.run = &r};
    assert_int_equal(f->st->ops->run_finish(f->st, &fin), 0);
    check_balance(f, 100000 - 3530, 0, 100000 - 3530);

    /* A second settlement is refused and writes nothing. */
    assert_int_equal(f->st->ops->run_finish(f->st, &fin), -EALREADY);
    int64_t credits, reserves, charges, releases;
    assert_int_equal(
        f->st->ops->ledger_totals(f->st, f->org, &credits, &reserves, &charges, &releases), 0);
    assert_int_equal(credits, 100000);
    assert_int_equal(reserves, 40000);
    assert_int_equal(charges, 3530);
    assert_int_equal(releases, 36470);

    struct eph_run got;
    assert_int_equal(f->st->ops->run_get(f->st, r.id, f->org, &got), 0);
    assert_int_equal(got.status, EPH_RUN_COMPLETED);
    assert_int_equal(got.cost.charged_micros + got.cost.released_micros, 40000);
    eph_run_release(&got);
    /* Another org's key never sees it. */
    assert_int_equal(f->st->ops->run_get(f->st, r.id, "org_other", &got), -ENOENT);
    eph_run_release(&r);
}

static void test_insufficient_balance(void **state)
{
    struct store_fixture *f = *state;
    struct eph_run r;
    make_run(&r, f->org, 100001);
    assert_int_equal(f->st->ops->run_insert(f->st, &r, NULL), -EDQUOT);
    check_balance(f, 100000, 0, 100000);
    assert_int_equal(f->st->ops->run_get(f->st, r.id, NULL, &(struct eph_run){0}), -ENOENT);
    eph_run_release(&r);
}

struct racer {
    struct store_fixture *f;
    int ok, refused;
};

static void *race(void *arg)
{
    struct racer *rc = arg;
    for (int i = 0; i < 10; i++) {
        struct eph_run r;
        make_run(&r, rc->f->org, 7000);
        int e = rc->f->st->ops->run_insert(rc->f->st, &r, NULL);
        if (e == 0)
            rc->ok++;
        else if (e == -EDQUOT)
            rc->refused++;
        eph_run_release(&r);
    }
    return NULL;
}

static void test_concurrent_reservations_never_overdraw(void **state)
{
    struct store_fixture *f = *state;
    pthread_t t[8];
    struct racer r[8];
    for (int i = 0; i < 8; i++) {
        r[i] = (struct racer){f, 0, 0};
        pthread_create(&t[i], NULL, race, &r[i]);
    }
    int ok = 0, refused = 0;
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        ok += r[i].ok;
        refused += r[i].refused;
    }
    /* 100000 / 7000 = 14 reservations fit, the other 66 are refused. */
    assert_int_equal(ok, 14);
    assert_int_equal(refused, 66);
    check_balance(f, 100000, 98000, 2000);
}

/* The per-org queue cap under concurrency: eight writers, 10 runs each, a cap of 5 queued runs and
 * credit for all of them: exactly 5 are queued, the rest refused -EAGAIN with nothing reserved.
 * Each check reads what the others committed before it (on PostgreSQL the org's row lock, taken
 * first, orders them). An unknown org is -ENOENT, and the cap is looked at before the balance. */
struct cap_racer {
    struct store_fixture *f;
    int ok, capped, other;
};

static void *cap_race(void *arg)
{
    struct cap_racer *rc = arg;
    for (int i = 0; i < 10; i++) {
        struct eph_run r;
        make_run(&r, rc->f->org, 100);
        int e = rc->f->st->ops->run_insert_capped(rc->f->st, &r, NULL, 5);
        if (e == 0)
            rc->ok++;
        else if (e == -EAGAIN)
            rc->capped++;
        else
            rc->other++;
        eph_run_release(&r);
    }
    return NULL;
}

static void test_queue_cap_holds_under_concurrency(void **state)
{
    struct store_fixture *f = *state;
    pthread_t t[8];
    struct cap_racer r[8];
    for (int i = 0; i < 8; i++) {
        r[i] = (struct cap_racer){f, 0, 0, 0};
        assert_int_equal(pthread_create(&t[i], NULL, cap_race, &r[i]), 0);
    }
    int ok = 0, capped = 0, other = 0;
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        ok += r[i].ok;
        capped += r[i].capped;
        other += r[i].other;
    }
    assert_int_equal(ok, 5);
    assert_int_equal(capped, 75);
    assert_int_equal(other, 0);
    check_balance(f, 100000, 500, 99500);
    /* Over the cap and over the balance: the cap says so first. */
    struct eph_run big;
    make_run(&big, f->org, 1000000);
    assert_int_equal(f->st->ops->run_insert_capped(f->st, &big, NULL, 5), -EAGAIN);
    assert_int_equal(f->st->ops->run_insert_capped(f->st, &big, NULL, 0), -EDQUOT);
    eph_run_release(&big);
    struct eph_run stray;
    make_run(&stray, "org_nosuch", 100);
    assert_int_equal(f->st->ops->run_insert(f->st, &stray, NULL), -ENOENT);
    eph_run_release(&stray);
    check_balance(f, 100000, 500, 99500);
}

static void test_settling_a_live_run_is_refused(void **state)
{
    /* run_finish refuses a terminal state that is not terminal. */
    struct store_fixture *f = *state;
    struct eph_run r;
    make_run(&r, f->org, 1000);
    assert_int_equal(f->st->ops->run_insert(f->st, &r, NULL), 0);
    r.status = EPH_RUN_RUNNING;
    struct eph_run_final fin = {.run = &r};
    assert_int_equal(f->st->ops->run_finish(f->st, &fin), -EINVAL);
    check_balance(f, 100000, 1000, 99000);
    eph_run_release(&r);
}

/* Settles r in a child process; returns the signal that ended the child, or 0 when it returned
 * (with run_finish's answer, 0 or not, in *finish_rc). Only unbalanced settlements are tried this
 * way: the check refuses them before the store's file is touched. */
static int settle_in_child(struct store_fixture *f, struct eph_run *r, int *finish_rc)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct eph_run_final fin = {.run = r};
        int rc = f->st->ops->run_finish(f->st, &fin);
        _exit(rc == 0 ? 0 : 1);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status))
        return WTERMSIG(status);
    *finish_rc = WEXITSTATUS(status);
    return 0;
}

static void test_unbalanced_settlement_is_a_bug(void **state)
{
    /* A settlement whose charge and release do not add up to the reservation, or whose charge is
     * not the sum of its parts, is a programmer error: the store aborts before writing it. */
    struct store_fixture *f = *state;
    struct eph_run r;
    make_run(&r, f->org, 1000);
    assert_int_equal(f->st->ops->run_insert(f->st, &r, NULL), 0);
    r.status = EPH_RUN_COMPLETED;
    r.finished_at_ms = eph_clock_real_ms();
    int finish_rc = -1;

    /* charged + released = 900 of a 1000 reservation */
    r.cost.model_micros = 400;
    r.cost.charged_micros = 400;
    r.cost.released_micros = 500;
    assert_int_equal(settle_in_child(f, &r, &finish_rc), SIGABRT);
    /* charged (400) is not model + web + compute (300) */
    r.cost.model_micros = 300;
    r.cost.released_micros = 600;
    assert_int_equal(settle_in_child(f, &r, &finish_rc), SIGABRT);
    /* a negative release */
    r.cost.model_micros = 1100;
    r.cost.charged_micros = 1100;
    r.cost.released_micros = -100;
    assert_int_equal(settle_in_child(f, &r, &finish_rc), SIGABRT);
    /* Nothing was written: the reservation still stands. */
    check_balance(f, 100000, 1000, 99000);

    /* The same settlement balanced goes through: the aborts above were the check's. */
    r.cost.model_micros = 400;
    r.cost.charged_micros = 400;
    r.cost.released_micros = 600;
    struct eph_run_final fin = {.run = &r};
    assert_int_equal(f->st->ops->run_finish(f->st, &fin), 0);
    check_balance(f, 100000 - 400, 0, 100000 - 400);
    eph_run_release(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_org_ensure_is_idempotent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reserve_then_settle, setup, teardown),
        cmocka_unit_test_setup_teardown(test_insufficient_balance, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_reservations_never_overdraw, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_queue_cap_holds_under_concurrency, setup, teardown),
        cmocka_unit_test_setup_teardown(test_settling_a_live_run_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unbalanced_settlement_is_a_bug, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
