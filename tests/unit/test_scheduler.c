/* The worker pool (src/run/scheduler.c) with a stub worker: FIFO order, the bound on concurrent
 * runs, queue depth and running counts, withdraw, the settler that finishes a handed run while
 * every worker is busy (so that an HTTP thread never has to), stop with its grace period and
 * cancel, refusals after stop, and the store's claims (a run claimed while also queued, or taken
 * from the queue when the claim fails; idle workers that look once per kick or period instead of
 * polling). Every wait is bounded; nothing
 * sleeps to synchronise. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "run/scheduler.h"

#define WAIT_S 20

/* The stub worker: records the ids it got and blocks while the gate is closed. */
struct stub {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool gate_open;
    unsigned inside; /* work calls entered and not returned */
    unsigned done;
    char ids[32][40];
    pthread_t threads[32];
    unsigned cancel_all_calls;
    struct eph_scheduler *sch; /* for take_next */
    bool claimed;
    bool claim_races_submit;  /* take_next hands the claimed run to the queue too */
    atomic_bool claim_closed; /* take_next finds nothing until the test opens it */
    atomic_uint take_calls;   /* take_next calls (also the refused ones) */
    atomic_bool claim_fails;  /* take_next fails (-EIO): the queue goes in its order */
    unsigned periodic_passes;
};

static void work(void *ctx, const char *run_id)
{
    struct stub *s = ctx;
    pthread_mutex_lock(&s->lock);
    unsigned n = s->inside + s->done;
    if (n < 32) {
        snprintf(s->ids[n], sizeof(s->ids[n]), "%s", run_id);
        s->threads[n] = pthread_self();
    }
    s->inside++;
    pthread_cond_broadcast(&s->cond);
    while (!s->gate_open)
        pthread_cond_wait(&s->cond, &s->lock);
    s->inside--;
    s->done++;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

static void cancel_all(void *ctx)
{
    struct stub *s = ctx;
    pthread_mutex_lock(&s->lock);
    s->cancel_all_calls++;
    s->gate_open = true; /* a cancel ends every run at once */
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

/* Waits until pred(s) holds or WAIT_S passes; true when it holds. */
static bool wait_for(struct stub *s, bool (*pred)(struct stub *, unsigned), unsigned arg)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += WAIT_S;
    pthread_mutex_lock(&s->lock);
    int rc = 0;
    while (!pred(s, arg) && rc == 0)
        rc = pthread_cond_timedwait(&s->cond, &s->lock, &until);
    bool ok = pred(s, arg);
    pthread_mutex_unlock(&s->lock);
    return ok;
}

static bool inside_is(struct stub *s, unsigned n)
{
    return s->inside == n;
}

static bool done_is(struct stub *s, unsigned n)
{
    return s->done == n;
}

static void open_gate(struct stub *s)
{
    pthread_mutex_lock(&s->lock);
    s->gate_open = true;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

static struct stub *stub_new(void)
{
    struct stub *s = calloc(1, sizeof(*s));
    assert_non_null(s);
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    return s;
}

static struct eph_scheduler *start(struct stub *s, unsigned workers)
{
    struct eph_scheduler_ops ops = {.ctx = s, .work = work, .cancel_all = cancel_all};
    struct eph_scheduler *sch = NULL;
    assert_int_equal(eph_scheduler_start(&ops, workers, 60, &sch), 0);
    assert_non_null(sch);
    return sch;
}

static void test_fifo_bounded_and_counted(void **state)
{
    struct stub *s = stub_new();
    struct eph_scheduler *sch = start(s, 2);
    assert_int_equal(eph_scheduler_submit(sch, "run_a"), 0);
    assert_int_equal(eph_scheduler_submit(sch, "run_b"), 0);
    assert_int_equal(eph_scheduler_submit(sch, "run_c"), 0);
    assert_int_equal(eph_scheduler_submit(sch, "run_d"), 0);
    /* Two workers: two runs at a time, the others wait in order. */
    assert_true(wait_for(s, inside_is, 2));
    assert_int_equal(eph_scheduler_running(sch), 2);
    assert_int_equal(eph_scheduler_queue_depth(sch), 2);
    pthread_mutex_lock(&s->lock);
    bool first_two = (!strcmp(s->ids[0], "run_a") && !strcmp(s->ids[1], "run_b")) ||
                     (!strcmp(s->ids[0], "run_b") && !strcmp(s->ids[1], "run_a"));
    pthread_mutex_unlock(&s->lock);
    assert_true(first_two);
    open_gate(s);
    assert_true(wait_for(s, done_is, 4));
    assert_int_equal(eph_scheduler_queue_depth(sch), 0);
    eph_scheduler_free(sch);
    free(s);
}

static void test_withdraw_takes_a_queued_run_only(void **state)
{
    struct stub *s = stub_new();
    struct eph_scheduler *sch = start(s, 1);
    assert_int_equal(eph_scheduler_submit(sch, "run_busy"), 0);
    assert_true(wait_for(s, inside_is, 1));
    assert_int_equal(eph_scheduler_submit(sch, "run_queued"), 0);
    assert_int_equal(eph_scheduler_queue_depth(sch), 1);
    /* The one a worker has is not in the queue; the queued one is taken out once. */
    assert_int_equal(eph_scheduler_withdraw(sch, "run_busy"), -ENOENT);
    assert_int_equal(eph_scheduler_withdraw(sch, "run_queued"), 0);
    assert_int_equal(eph_scheduler_withdraw(sch, "run_queued"), -ENOENT);
    assert_int_equal(eph_scheduler_queue_depth(sch), 0);
    open_gate(s);
    assert_true(wait_for(s, done_is, 1));
    eph_scheduler_free(sch);
    /* The withdrawn run never reached a worker. */
    assert_int_equal(s->done, 1);
    assert_string_equal(s->ids[0], "run_busy");
    free(s);
}

/* A shared store's claim: hands out run_claimed once, and (the race seen on PostgreSQL) the run's
 * creation hands it to this node's queue while the claim is being made. */
static int take_next(void *ctx, const char *const *waiting, size_t nwaiting, char *run_id,
                     size_t idlen)
{
    struct stub *s = ctx;
    (void)waiting;
    (void)nwaiting;
    atomic_fetch_add(&s->take_calls, 1);
    if (atomic_load(&s->claim_fails))
        return -EIO;
    if (s->claimed || atomic_load(&s->claim_closed))
        return -ENOENT;
    s->claimed = true;
    if (s->claim_races_submit)
        assert_int_equal(eph_scheduler_submit(s->sch, "run_claimed"), 0);
    snprintf(run_id, idlen, "%s", "run_claimed");
    return 0;
}

static void test_claimed_run_is_not_queued_twice(void **state)
{
    struct stub *s = stub_new();
    s->claim_races_submit = true;
    /* Idle workers look at start-up, before s->sch is set: nothing to claim until it is. */
    atomic_store(&s->claim_closed, true);
    struct eph_scheduler_ops ops = {
        .ctx = s, .work = work, .cancel_all = cancel_all, .take_next = take_next};
    assert_int_equal(eph_scheduler_start(&ops, 1, 60, &s->sch), 0);
    atomic_store(&s->claim_closed, false);
    eph_scheduler_kick(s->sch);
    assert_true(wait_for(s, inside_is, 1));
    /* The queue entry the race left is gone, and the run is not queued again while it runs. */
    assert_int_equal(eph_scheduler_queue_depth(s->sch), 0);
    assert_int_equal(eph_scheduler_submit(s->sch, "run_claimed"), 0);
    assert_int_equal(eph_scheduler_queue_depth(s->sch), 0);
    assert_int_equal(eph_scheduler_running(s->sch), 1);
    open_gate(s);
    assert_true(wait_for(s, done_is, 1));
    assert_int_equal(eph_scheduler_queue_depth(s->sch), 0);
    eph_scheduler_free(s->sch);
    assert_int_equal(s->done, 1);
    free(s);
}

/* A run one worker took from the queue (the store could not choose) and another claimed from the
 * store at the same time: both end, each worker releasing its own entry (the store's claim
 * decides who really works on it; the scheduler must stay sound). Under SANITIZE=address,
 * releasing by id instead of by entry is a use after free here (it crashed the server on
 * PostgreSQL). */
static void test_queued_and_claimed_at_once(void **state)
{
    struct stub *s = stub_new();
    atomic_store(&s->claim_closed, true); /* idle workers look at start-up: not yet */
    atomic_store(&s->claim_fails, true);
    struct eph_scheduler_ops ops = {
        .ctx = s, .work = work, .cancel_all = cancel_all, .take_next = take_next};
    assert_int_equal(eph_scheduler_start(&ops, 2, 60, &s->sch), 0);
    assert_int_equal(eph_scheduler_submit(s->sch, "run_claimed"), 0);
    assert_true(wait_for(s, inside_is, 1));
    atomic_store(&s->claim_fails, false);
    atomic_store(&s->claim_closed, false);
    eph_scheduler_kick(s->sch);
    assert_true(wait_for(s, inside_is, 2));
    assert_int_equal(eph_scheduler_running(s->sch), 2);
    open_gate(s);
    assert_true(wait_for(s, done_is, 2));
    eph_scheduler_free(s->sch);
    free(s);
}

static void periodic(void *ctx)
{
    struct stub *s = ctx;
    pthread_mutex_lock(&s->lock);
    s->periodic_passes++;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

static bool passes_at_least(struct stub *s, unsigned n)
{
    return s->periodic_passes >= n;
}

/* On a shared store, idle workers do not poll it: one look at start, one per kick, one per
 * period (for a notice that was missed), whatever the number of workers. Polling workers made
 * 64 idle workers per node flood a PostgreSQL pool of 4 connections until the lease keeper's
 * renewals waited seconds for one. A run that becomes claimable without a notice is still
 * claimed, at the next period. */
static void test_idle_workers_do_not_poll(void **state)
{
    struct stub *s = stub_new();
    atomic_store(&s->claim_closed, true);
    struct eph_scheduler_ops ops = {.ctx = s,
                                    .work = work,
                                    .cancel_all = cancel_all,
                                    .take_next = take_next,
                                    .periodic = periodic};
    assert_int_equal(eph_scheduler_start(&ops, 16, 1, &s->sch), 0);
    assert_true(wait_for(s, passes_at_least, 3));
    /* The look at start, one per pass so far (a pass may have just ended). */
    pthread_mutex_lock(&s->lock);
    unsigned passes = s->periodic_passes;
    pthread_mutex_unlock(&s->lock);
    unsigned calls = atomic_load(&s->take_calls);
    assert_true(calls >= passes);
    assert_true(calls <= passes + 2);
    /* Claimable now, and nobody kicks: the next period's look takes it. */
    atomic_store(&s->claim_closed, false);
    assert_true(wait_for(s, inside_is, 1));
    assert_string_equal(s->ids[0], "run_claimed");
    open_gate(s);
    assert_true(wait_for(s, done_is, 1));
    eph_scheduler_free(s->sch);
    free(s);
}

/* The cancel handler's path: a withdrawn run is handed to the settler, which works on it while
 * every worker is busy, on a thread that is neither a worker nor the caller. */
static void test_settler_runs_while_workers_are_busy(void **state)
{
    struct stub *s = stub_new();
    struct eph_scheduler *sch = start(s, 1);
    assert_int_equal(eph_scheduler_submit(sch, "run_long"), 0);
    assert_true(wait_for(s, inside_is, 1));
    assert_int_equal(eph_scheduler_settle(sch, "run_cancelled"), 0);
    /* The settler entered it although the only worker is still blocked. */
    assert_true(wait_for(s, inside_is, 2));
    assert_int_equal(eph_scheduler_running(sch), 2);
    pthread_mutex_lock(&s->lock);
    assert_string_equal(s->ids[1], "run_cancelled");
    assert_false(pthread_equal(s->threads[1], s->threads[0]));
    assert_false(pthread_equal(s->threads[1], pthread_self()));
    pthread_mutex_unlock(&s->lock);
    open_gate(s);
    assert_true(wait_for(s, done_is, 2));
    eph_scheduler_free(sch);
    free(s);
}

static void test_stop_cancels_after_grace_and_refuses_after(void **state)
{
    struct stub *s = stub_new();
    struct eph_scheduler *sch = start(s, 1);
    assert_int_equal(eph_scheduler_submit(sch, "run_running"), 0);
    assert_true(wait_for(s, inside_is, 1));
    assert_int_equal(eph_scheduler_submit(sch, "run_waiting"), 0);
    /* Grace 0: the running run is cancelled (the stub returns when cancelled), the queued one is
     * dropped, never worked (it stays queued in the store for the next start). */
    eph_scheduler_stop(sch, 0);
    assert_int_equal(s->cancel_all_calls, 1);
    assert_int_equal(s->done, 1);
    assert_int_equal(eph_scheduler_queue_depth(sch), 0);
    assert_int_equal(eph_scheduler_submit(sch, "run_late"), -ESHUTDOWN);
    assert_int_equal(eph_scheduler_settle(sch, "run_late"), -ESHUTDOWN);
    eph_scheduler_free(sch);
    assert_int_equal(s->done, 1);
    free(s);
}

static void test_stop_within_grace_does_not_cancel(void **state)
{
    struct stub *s = stub_new();
    s->gate_open = true;
    struct eph_scheduler *sch = start(s, 2);
    assert_int_equal(eph_scheduler_submit(sch, "run_quick"), 0);
    assert_true(wait_for(s, done_is, 1));
    eph_scheduler_stop(sch, 5);
    assert_int_equal(s->cancel_all_calls, 0);
    eph_scheduler_free(sch);
    free(s);
}

static void test_bad_arguments(void **state)
{
    struct eph_scheduler *sch = (struct eph_scheduler *)1;
    struct eph_scheduler_ops none = {0};
    assert_int_equal(eph_scheduler_start(&none, 1, 1, &sch), -EINVAL);
    assert_null(sch);
    eph_scheduler_stop(NULL, 0);
    eph_scheduler_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fifo_bounded_and_counted),
        cmocka_unit_test(test_withdraw_takes_a_queued_run_only),
        cmocka_unit_test(test_claimed_run_is_not_queued_twice),
        cmocka_unit_test(test_queued_and_claimed_at_once),
        cmocka_unit_test(test_idle_workers_do_not_poll),
        cmocka_unit_test(test_settler_runs_while_workers_are_busy),
        cmocka_unit_test(test_stop_cancels_after_grace_and_refuses_after),
        cmocka_unit_test(test_stop_within_grace_does_not_cancel),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
