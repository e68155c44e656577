/* The timeline: numbering, storage order, waiting for new events, closing, and the event JSON. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/clock.h"
#include "api/json.h"
#include "common/id.h"
#include "run/live.h"
#include "store/store.h"

static char dir[64];
static struct eph_store *st;
static char org[48];

/* The live registry under test: one per test. */
static struct eph_live_registry *reg;

static int setup(void **state)
{
    snprintf(dir, sizeof(dir), "/tmp/eph-timeline-XXXXXX");
    assert_non_null(mkdtemp(dir));
    char path[128], err[256];
    snprintf(path, sizeof(path), "%s/t.db", dir);
    assert_int_equal(eph_store_open(path, &st, err, sizeof(err)), 0);
    bool created;
    assert_int_equal(st->ops->org_ensure(st, "o", 1000000, org, sizeof(org), &created), 0);
    assert_int_equal(eph_live_registry_new(&reg), 0);
    return 0;
}

static int teardown(void **state)
{
    eph_live_registry_free(reg);
    reg = NULL;
    st->ops->close(st);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    return system(cmd);
}

static void new_run(char id[EPH_RUN_ID_LEN + 1], int64_t created)
{
    struct eph_run r;
    eph_run_init(&r);
    assert_int_equal(eph_id_hex("run_", 16, r.id, sizeof(r.id)), 0);
    snprintf(r.org_id, sizeof(r.org_id), "%s", org);
    r.model = strdup("m");
    r.created_at_ms = created;
    r.cost.reserved_micros = 100;
    struct eph_event first = {.seq = 1, .at_ms = created};
    snprintf(first.source, sizeof(first.source), "queue");
    snprintf(first.type, sizeof(first.type), "run.queued");
    first.message = strdup("budget of $0.0001 reserved");
    first.data = json_object();
    assert_int_equal(st->ops->run_insert(st, &r, &first), 0);
    eph_event_release(&first);
    memcpy(id, r.id, EPH_RUN_ID_LEN + 1);
    eph_run_release(&r);
    assert_int_equal(eph_live_register(reg, id, created, 1), 0);
}

struct collected {
    uint64_t seqs[16];
    char types[16][32];
    int n;
};

static int collect(const struct eph_event *e, void *ctx)
{
    struct collected *c = ctx;
    if (c->n < 16) {
        c->seqs[c->n] = e->seq;
        snprintf(c->types[c->n], 32, "%s", e->type);
        c->n++;
    }
    return 0;
}

static void test_events_numbered_in_order(void **state)
{
    char id[EPH_RUN_ID_LEN + 1];
    new_run(id, eph_clock_real_ms() - 2500);
    struct eph_live *l = eph_live_get(reg, id);
    assert_non_null(l);
    assert_int_equal(
        eph_live_emit(l, st, "sandbox", "sandbox.ready", NULL, "namespace sandbox ready"), 0);
    assert_int_equal(eph_live_emit(l, st, "shell", "shell.command",
                                   json_pack("{s:i}", "exit_code", 0), "$ %s", "pwd; whoami"),
                     0);
    struct collected c = {0};
    assert_int_equal(st->ops->events_list(st, id, 0, 0, collect, &c), 0);
    assert_int_equal(c.n, 3);
    assert_int_equal(c.seqs[0], 1);
    assert_int_equal(c.seqs[1], 2);
    assert_int_equal(c.seqs[2], 3);
    assert_string_equal(c.types[0], "run.queued");
    assert_string_equal(c.types[2], "shell.command");
    /* after_seq skips what a client has seen (SSE resume). */
    struct collected d = {0};
    assert_int_equal(st->ops->events_list(st, id, 2, 0, collect, &d), 0);
    assert_int_equal(d.n, 1);
    assert_int_equal(d.seqs[0], 3);
    eph_live_put(l);
}

static int first_json(const struct eph_event *e, void *ctx)
{
    if (e->seq == 2)
        *(json_t **)ctx = eph_event_to_json(e);
    return 0;
}

static void test_event_json_shape(void **state)
{
    char id[EPH_RUN_ID_LEN + 1];
    new_run(id, eph_clock_real_ms() - 5250);
    struct eph_live *l = eph_live_get(reg, id);
    assert_int_equal(eph_live_emit(l, st, "shell", "shell.command", NULL, "$ pwd"), 0);
    json_t *o = NULL;
    assert_int_equal(st->ops->events_list(st, id, 0, 0, first_json, &o), 0);
    assert_non_null(o);
    assert_int_equal(json_integer_value(json_object_get(o, "seq")), 2);
    double t = json_real_value(json_object_get(o, "t"));
    assert_true(t >= 5.25 && t < 7.0); /* seconds since the run was created */
    assert_string_equal(json_string_value(json_object_get(o, "source")), "shell");
    assert_string_equal(json_string_value(json_object_get(o, "message")), "$ pwd");
    assert_true(json_is_object(json_object_get(o, "data")));
    assert_int_equal(strlen(json_string_value(json_object_get(o, "at"))), 24);
    json_decref(o);
    eph_live_put(l);
}

struct waiter {
    struct eph_live *l;
    uint64_t after;
    _Atomic pid_t tid;
    uint64_t seq;
    bool closed;
};

/* The waiter's own deadline is far beyond the test's bound, so that it can only return in time
 * because it was woken, never because its wait expired. */
#define WAITER_DEADLINE_NS (600ull * 1000000000u)
/* How long the test waits for a waiter to block, then to wake: generous for a loaded machine. */
#define BOUND_NS (20ull * 1000000000u)

static void *wait_thread(void *arg)
{
    struct waiter *w = arg;
    atomic_store(&w->tid, gettid());
    w->seq = eph_live_wait(w->l, w->after, eph_clock_mono_ns() + WAITER_DEADLINE_NS, &w->closed);
    return NULL;
}

/* The state letter of one of this process's threads ('S' while it sleeps in a wait), or 0. */
static char thread_state(pid_t tid)
{
    char path[64], line[512];
    snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    size_t n = fread(line, 1, sizeof(line) - 1, f);
    fclose(f);
    line[n] = '\0';
    char *p = strrchr(line, ')'); /* the name may hold spaces and parentheses */
    return p && p[1] == ' ' ? p[2] : 0;
}

/* Starts a waiter and returns once it is blocked in eph_live_wait: its thread sleeps, and it has
 * not returned. The only sleep on its way in is the condition wait (the lock is not contended). */
static void start_blocked_waiter(struct waiter *w, pthread_t *t)
{
    atomic_init(&w->tid, 0);
    assert_int_equal(pthread_create(t, NULL, wait_thread, w), 0);
    uint64_t until = eph_clock_mono_ns() + BOUND_NS;
    while (eph_clock_mono_ns() < until) {
        pid_t tid = atomic_load(&w->tid);
        if (tid && thread_state(tid) == 'S' && pthread_tryjoin_np(*t, NULL) == EBUSY)
            return;
        sched_yield();
    }
    fail_msg("the waiter did not block within the bound");
}

/* Joins the waiter, failing if it is still blocked after the bound: it was not woken. */
static void join_woken_waiter(pthread_t t)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)(BOUND_NS / 1000000000u);
    int rc = pthread_timedjoin_np(t, NULL, &ts);
    if (rc == ETIMEDOUT)
        fail_msg("the waiter was not woken");
    assert_int_equal(rc, 0);
}

static void test_waiters_wake_on_emit_and_close(void **state)
{
    char id[EPH_RUN_ID_LEN + 1];
    new_run(id, eph_clock_real_ms());
    struct eph_live *l = eph_live_get(reg, id);
    struct waiter w = {.l = l, .after = 1};
    pthread_t t;
    start_blocked_waiter(&w, &t);
    assert_int_equal(eph_live_emit(l, st, "worker", "worker.started", NULL, "worker started"), 0);
    join_woken_waiter(t);
    assert_int_equal(w.seq, 2);
    assert_false(w.closed);

    /* Numbered but not yet stored: no wake-up. Closing wakes a waiter past that number. */
    struct eph_event e;
    eph_live_prepare(l, &e, "worker", "worker.destroyed", NULL, "%s charged", "$0.00");
    assert_int_equal(e.seq, 3);
    eph_event_release(&e);
    struct waiter w2 = {.l = l, .after = 3};
    start_blocked_waiter(&w2, &t);
    eph_live_close(l, 3, NULL);
    join_woken_waiter(t);
    assert_int_equal(w2.seq, 3);
    assert_true(w2.closed);

    bool closed;
    assert_int_equal(eph_live_wait(l, 3, eph_clock_mono_ns() + WAITER_DEADLINE_NS, &closed), 3);
    assert_true(closed);
    assert_true(eph_live_wait_closed(l, eph_clock_mono_ns()));
    /* A closed run is no longer found live, but the reference held stays valid. */
    assert_null(eph_live_get(reg, id));
    eph_live_put(l);
}

static void test_cancel_flag(void **state)
{
    char id[EPH_RUN_ID_LEN + 1];
    new_run(id, eph_clock_real_ms());
    struct eph_live *l = eph_live_get(reg, id);
    assert_false(eph_live_cancelled(l));
    eph_live_cancel(l);
    assert_true(eph_live_cancelled(l));
    assert_true(atomic_load(eph_live_cancel_flag(l)));
    eph_live_close(l, 1, NULL);
    eph_live_put(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_events_numbered_in_order),
        cmocka_unit_test(test_event_json_shape),
        cmocka_unit_test(test_waiters_wake_on_emit_and_close),
        cmocka_unit_test(test_cancel_flag),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
