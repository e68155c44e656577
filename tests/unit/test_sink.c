/* Held events (common/sink.h): what is held is recorded in front of the next event emitted with
 * progress, in one batch where the sink takes batches, else one by one in order; a full hold
 * sends what it holds and then the new event, in order; a flush sends each alone; a NULL sink or
 * one without events drops them (their data released, which the leak checker sees). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/sink.h"

struct rec {
    json_t *log; /* [[type, message, batch]] */
    int batch;   /* the number of the batch being recorded, 0 outside one */
    int batches;
    int progress;
};

static void keep(struct rec *r, const char *type, json_t *data, const char *message)
{
    json_array_append_new(r->log, json_pack("[s, s, i]", type, message, r->batch));
    json_decref(data);
}

static int on_event(void *ctx, const char *source, const char *type, json_t *data,
                    const char *message)
{
    (void)source;
    keep(ctx, type, data, message);
    return 0;
}

static int on_progress(void *ctx)
{
    ((struct rec *)ctx)->progress++;
    return 0;
}

static int on_batch(void *ctx, const struct eph_sink_event *ev, size_t n)
{
    struct rec *r = ctx;
    r->batch = ++r->batches;
    for (size_t i = 0; i < n; i++)
        keep(r, ev[i].type, ev[i].data, ev[i].message);
    r->batch = 0;
    return 0;
}

static void expect(const struct rec *r, size_t i, const char *type, const char *message, int batch)
{
    json_t *e = json_array_get(r->log, i);
    assert_non_null(e);
    assert_string_equal(json_string_value(json_array_get(e, 0)), type);
    assert_string_equal(json_string_value(json_array_get(e, 1)), message);
    assert_int_equal(json_integer_value(json_array_get(e, 2)), batch);
}

static void test_held_go_first_in_one_batch(void **state)
{
    (void)state;
    struct rec r = {.log = json_array()};
    struct eph_sink sink = {
        .ctx = &r, .event = on_event, .progress = on_progress, .event_progress = on_batch};
    struct eph_sink_held h = {0};
    assert_int_equal(eph_sink_hold(&sink, &h, "shell", "shell.output",
                                   json_pack("{s:s}", "text", "a"), "$ %s", "cmd"),
                     0);
    assert_int_equal(eph_sink_hold(&sink, &h, "shell", "shell.output", NULL, "$ cmd"), 0);
    assert_int_equal(json_array_size(r.log), 0); /* held: nothing recorded yet */
    assert_int_equal(eph_sink_emit_progress_after(&sink, &h, "shell", "shell.command",
                                                  json_object(), "$ %s", "cmd"),
                     0);
    assert_int_equal(h.n, 0);
    assert_int_equal(json_array_size(r.log), 3);
    expect(&r, 0, "shell.output", "$ cmd", 1);
    expect(&r, 1, "shell.output", "$ cmd", 1);
    expect(&r, 2, "shell.command", "$ cmd", 1);
    assert_int_equal(r.batches, 1);

    /* Nothing held: a batch of one. */
    assert_int_equal(eph_sink_emit_progress_after(&sink, &h, "model", "model.call", NULL, "m"), 0);
    expect(&r, 3, "model.call", "m", 2);
    json_decref(r.log);
}

static void test_without_batches_in_order(void **state)
{
    (void)state;
    struct rec r = {.log = json_array()};
    struct eph_sink sink = {.ctx = &r, .event = on_event, .progress = on_progress};
    struct eph_sink_held h = {0};
    assert_int_equal(eph_sink_hold(&sink, &h, "shell", "shell.output", json_object(), "one"), 0);
    assert_int_equal(
        eph_sink_emit_progress_after(&sink, &h, "shell", "shell.command", json_object(), "two"), 0);
    assert_int_equal(json_array_size(r.log), 2);
    expect(&r, 0, "shell.output", "one", 0);
    expect(&r, 1, "shell.command", "two", 0);
    assert_int_equal(r.progress, 1);
    json_decref(r.log);
}

static void test_full_hold_and_flush_keep_the_order(void **state)
{
    (void)state;
    struct rec r = {.log = json_array()};
    struct eph_sink sink = {.ctx = &r, .event = on_event, .event_progress = on_batch};
    struct eph_sink_held h = {0};
    char msg[16];
    for (int i = 0; i < EPH_SINK_HELD_MAX; i++) {
        snprintf(msg, sizeof(msg), "%d", i);
        assert_int_equal(eph_sink_hold(&sink, &h, "s", "t", json_object(), "%s", msg), 0);
    }
    assert_int_equal(json_array_size(r.log), 0);
    /* One more than it holds: those held first, then it, each alone. */
    assert_int_equal(eph_sink_hold(&sink, &h, "s", "t", json_object(), "last"), 0);
    assert_int_equal(h.n, 0);
    assert_int_equal(json_array_size(r.log), EPH_SINK_HELD_MAX + 1);
    for (int i = 0; i < EPH_SINK_HELD_MAX; i++) {
        snprintf(msg, sizeof(msg), "%d", i);
        expect(&r, (size_t)i, "t", msg, 0);
    }
    expect(&r, EPH_SINK_HELD_MAX, "t", "last", 0);

    /* A flush: each alone, nothing held after. */
    assert_int_equal(eph_sink_hold(&sink, &h, "s", "u", json_object(), "x"), 0);
    eph_sink_held_flush(&sink, &h);
    assert_int_equal(h.n, 0);
    expect(&r, EPH_SINK_HELD_MAX + 1, "u", "x", 0);
    eph_sink_held_flush(&sink, &h); /* empty: nothing */
    assert_int_equal(json_array_size(r.log), EPH_SINK_HELD_MAX + 2);
    json_decref(r.log);
}

static void test_no_sink_drops_them(void **state)
{
    (void)state;
    struct eph_sink_held h = {0};
    assert_int_equal(eph_sink_hold(NULL, &h, "s", "t", json_object(), "x"), 0);
    assert_int_equal(h.n, 1);
    assert_int_equal(eph_sink_emit_progress_after(NULL, &h, "s", "t", json_object(), "y"), 0);
    assert_int_equal(h.n, 0);
    struct eph_sink none = {0};
    assert_int_equal(eph_sink_hold(&none, &h, "s", "t", json_object(), "x"), 0);
    eph_sink_held_flush(&none, &h);
    assert_int_equal(h.n, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_held_go_first_in_one_batch),
        cmocka_unit_test(test_without_batches_in_order),
        cmocka_unit_test(test_full_hold_and_flush_keep_the_order),
        cmocka_unit_test(test_no_sink_drops_them),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
