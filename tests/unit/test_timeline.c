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
#include "run/event_wire.h"
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

/* The event with seq 2 as stored: its text, parsed. */
static int first_json(const struct eph_event *e, void *ctx)
{
    if (e->seq == 2) {
        assert_non_null(e->wire);
        *(json_t **)ctx = json_loads(e->wire, 0, NULL);
    }
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

/* What the API serves for each event, and what the store holds. */
struct served {
    size_t n;
    int same_pointer;   /* served straight from the stored text, not made again */
    const char *expect; /* when set: the text every event listed must have been stored with */
};

static int check_served(const struct eph_event *e, void *ctx)
{
    struct served *sv = ctx;
    char *made;
    const char *text = eph_event_wire(e, &made);
    assert_non_null(text);
    if (sv->expect)
        assert_string_equal(e->wire, sv->expect);
    if (e->wire) {
        assert_null(made);
        sv->same_pointer += text == e->wire;
    }
    /* The wire form of before, field order and number format included: what the API's replies
     * made of the event object each time it was read. */
    json_t *o = eph_event_to_json(e);
    char *before = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(10));
    json_decref(o);
    assert_string_equal(text, before);
    free(before);
    free(made);
    sv->n++;
    return 0;
}

/* Each event is serialised once, when it is emitted: the store keeps that text, and the text served
 * is the text stored, byte for byte, in the form the API has always served. A row without it (one
 * stored before, or blanked by the retention reaper) is served in the same form, made on read. */
static void test_event_served_as_stored(void **state)
{
    char id[EPH_RUN_ID_LEN + 1];
    new_run(id, eph_clock_real_ms() - 1234);
    struct eph_live *l = eph_live_get(reg, id);
    assert_int_equal(eph_live_emit(l, st, "shell", "shell.command",
                                   json_pack("{s:s, s:f, s:b}", "output", "caf\u00e9 \"q\"\n", "x",
                                             0.1, "ok", 1),
                                   "$ %s", "echo \"caf\u00e9\""),
                     0);
    struct eph_event e;
    eph_live_prepare(l, &e, "run", "run.completed", NULL, "done");
    assert_non_null(e.wire);
    assert_int_equal(st->ops->event_append(st, id, &e), 0);
    char *prepared = strdup(e.wire);
    eph_event_release(&e);

    struct served sv = {0};
    assert_int_equal(st->ops->events_list(st, id, 0, 0, check_served, &sv), 0);
    assert_int_equal(sv.n, 3);
    assert_int_equal(sv.same_pointer, 2); /* the first (run.queued) was stored without text */
    /* A prepared event is stored with the text made when it was numbered. */
    struct served last = {.expect = prepared};
    assert_int_equal(st->ops->events_list(st, id, 2, 0, check_served, &last), 0);
    assert_int_equal(last.n, 1);
    assert_int_equal(last.same_pointer, 1);
    free(prepared);
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

/* ---- a store whose event writes for one run block until the test releases them ---- */

static const struct eph_store_ops *real_ops;
static struct eph_store_ops slow_ops;
static pthread_mutex_t slow_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t slow_cond = PTHREAD_COND_INITIALIZER;
static char slow_run[EPH_RUN_ID_LEN + 1];
static bool slow_entered, slow_released;

static int slow_event_append(struct eph_store *s, const char *run_id, const struct eph_event *e)
{
    if (strcmp(run_id, slow_run) == 0) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 60; /* bounded: a broken test ends, it does not hang */
        pthread_mutex_lock(&slow_lock);
        slow_entered = true;
        pthread_cond_broadcast(&slow_cond);
        int rc = 0;
        while (!slow_released && rc == 0)
            rc = pthread_cond_timedwait(&slow_cond, &slow_lock, &until);
        pthread_mutex_unlock(&slow_lock);
    }
    return real_ops->event_append(s, run_id, e);
}

struct slow_writer {
    struct eph_live *l;
    int rc;
};

static void *slow_writer_main(void *arg)
{
    struct slow_writer *w = arg;
    w->rc = eph_live_emit(w->l, st, "shell", "shell.command", NULL, "$ sleep");
    return NULL;
}

struct reader {
    struct eph_live *slow;  /* the run whose store write is blocked */
    struct eph_live *other; /* another run */
    const char *slow_id;
    uint64_t seq;
    bool closed;
    int other_rc;
};

/* What the HTTP threads do: look at the blocked run's state (long poll, SSE scan), poll its
 * timeline with an expired deadline, find it in the registry, and another run's worker emits. */
static void *reader_main(void *arg)
{
    struct reader *r = arg;
    eph_live_state(r->slow, &r->seq, &r->closed);
    eph_live_wait(r->slow, r->seq, eph_clock_mono_ns(), &r->closed);
    struct eph_live *again = eph_live_get(reg, r->slow_id);
    eph_live_put(again);
    r->other_rc = eph_live_emit(r->other, st, "worker", "worker.started", NULL, "worker started");
    return NULL;
}

/* A worker's store write that does not return (a slow disk, a fsync) holds up neither the readers
 * of its own run nor another run's worker: the registry's lock is never held across the store.
 * The reader must finish while the write is still blocked; the bound only turns a hang into a
 * failure. */
static void test_slow_store_write_blocks_no_reader(void **state)
{
    char a[EPH_RUN_ID_LEN + 1], b[EPH_RUN_ID_LEN + 1];
    new_run(a, eph_clock_real_ms());
    new_run(b, eph_clock_real_ms());
    struct eph_live *la = eph_live_get(reg, a), *lb = eph_live_get(reg, b);
    assert_non_null(la);
    assert_non_null(lb);
    snprintf(slow_run, sizeof(slow_run), "%s", a);
    slow_entered = slow_released = false;
    real_ops = st->ops;
    slow_ops = *real_ops;
    slow_ops.event_append = slow_event_append;
    st->ops = &slow_ops;

    pthread_t wt, rt;
    struct slow_writer w = {.l = la};
    assert_int_equal(pthread_create(&wt, NULL, slow_writer_main, &w), 0);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)(BOUND_NS / 1000000000u);
    pthread_mutex_lock(&slow_lock);
    int rc = 0;
    while (!slow_entered && rc == 0)
        rc = pthread_cond_timedwait(&slow_cond, &slow_lock, &until);
    bool entered = slow_entered;
    pthread_mutex_unlock(&slow_lock);
    assert_true(entered);

    struct reader r = {.slow = la, .other = lb, .slow_id = a};
    assert_int_equal(pthread_create(&rt, NULL, reader_main, &r), 0);
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)(BOUND_NS / 1000000000u);
    int jrc = pthread_timedjoin_np(rt, NULL, &until);
    /* The write is still blocked: the reader did not wait for it. */
    pthread_mutex_lock(&slow_lock);
    bool still_blocked = !slow_released;
    slow_released = true;
    pthread_cond_broadcast(&slow_cond);
    pthread_mutex_unlock(&slow_lock);
    if (jrc == ETIMEDOUT)
        pthread_join(rt, NULL);
    pthread_join(wt, NULL);
    st->ops = real_ops;
    assert_int_equal(jrc, 0);
    assert_true(still_blocked);
    assert_int_equal(r.seq, 1); /* the blocked event is not published before it is stored */
    assert_false(r.closed);
    assert_int_equal(r.other_rc, 0);
    assert_int_equal(w.rc, 0);
    uint64_t last;
    bool closed;
    eph_live_state(la, &last, &closed);
    assert_int_equal(last, 2);
    eph_live_close(la, 2, NULL);
    eph_live_close(lb, 2, NULL);
    eph_live_put(la);
    eph_live_put(lb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_events_numbered_in_order),
        cmocka_unit_test(test_event_json_shape),
        cmocka_unit_test(test_event_served_as_stored),
        cmocka_unit_test(test_waiters_wake_on_emit_and_close),
        cmocka_unit_test(test_cancel_flag),
        cmocka_unit_test(test_slow_store_write_blocks_no_reader),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
