/*
 * test_cli_render.c - the timeline in the product page's layout, the labels of every source, and
 * what hostile messages (terminal escapes, bidi overrides, huge or missing fields) turn into.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cli/render.h"

static char *out_buf;
static size_t out_len;
static FILE *out;
static struct eph_cli_render r;

static int setup(void **state)
{
    out = open_memstream(&out_buf, &out_len);
    assert_non_null(out);
    eph_cli_render_init(&r, out, false);
    return 0;
}

static int teardown(void **state)
{
    fclose(out);
    free(out_buf);
    out_buf = NULL;
    return 0;
}

/* A fresh, empty output stream. */
static void reset_out(void **state)
{
    teardown(state);
    setup(state);
}

static const char *text(void)
{
    fflush(out);
    return out_buf;
}

static void ev(const char *json)
{
    assert_int_equal(eph_cli_render_event_json(&r, json, strlen(json)), 0);
}

/* The seed run's timeline, event by event, prints exactly the product page's table. */
static void test_seed_timeline(void **state)
{
    ev("{\"seq\":1,\"t\":0,\"source\":\"queue\",\"type\":\"run.queued\",\"message\":\"budget of "
       "$0.04 reserved\"}");
    ev("{\"seq\":2,\"t\":2.42,\"source\":\"sandbox\",\"type\":\"sandbox.ready\",\"message\":"
       "\"microVM ready\"}");
    ev("{\"seq\":3,\"t\":2.47,\"source\":\"worker\",\"type\":\"worker.started\",\"message\":"
       "\"worker started · shell on · web off\"}");
    ev("{\"seq\":4,\"t\":5.25,\"at\":\"2026-10-07T15:01:53.370Z\",\"source\":\"shell\",\"type\":"
       "\"shell.command\",\"message\":\"$ pwd; whoami\",\"data\":{\"exit_code\":0}}");
    ev("{\"seq\":5,\"t\":5.5,\"source\":\"model\",\"type\":\"model.call\",\"message\":\"model call "
       "1 · 1,702 tokens · $0.00011\"}");
    ev("{\"seq\":6,\"t\":15.83,\"source\":\"sandbox\",\"type\":\"sandbox.destroyed\",\"message\":"
       "\"microVM destroyed\"}");
    ev("{\"seq\":7,\"t\":15.84,\"source\":\"run\",\"type\":\"run.completed\",\"message\":\"3 model "
       "calls, 5,214 tokens\"}");
    assert_false(r.final_seen);
    ev("{\"seq\":8,\"t\":16.24,\"source\":\"worker\",\"type\":\"worker.destroyed\",\"message\":\"$"
       "0.00353 charged, $0.03647 released\"}");
    assert_true(r.final_seen);
    assert_string_equal(text(),
                        "   0.00  Queued            budget of $0.04 reserved\n"
                        "   2.42  MicroVM           microVM ready\n"
                        "   2.47  MicroVM           worker started · shell on · web off\n"
                        "   5.25  Shell             $ pwd; whoami\n"
                        "   5.50  Model             model call 1 · 1,702 tokens · $0.00011\n"
                        "  15.83  MicroVM           microVM destroyed\n"
                        "  15.84  Completed         3 model calls, 5,214 tokens\n"
                        "  16.24  Worker destroyed  $0.00353 charged, $0.03647 released\n");
    assert_int_equal(r.printed, 8);
    assert_int_equal(r.last_seq, 8);
}

static void test_labels(void **state)
{
    char l[EPH_CLI_LABEL_MAX];
    struct eph_cli_render *rr = &r;
    assert_string_equal(eph_cli_render_label(rr, "worker", "worker.started", NULL, "x", l),
                        "Worker");
    assert_string_equal(
        eph_cli_render_label(rr, "sandbox", "sandbox.ready", NULL, "gVisor sandbox ready", l),
        "gVisor");
    assert_string_equal(eph_cli_render_label(rr, "worker", "worker.started", NULL, "x", l),
                        "gVisor");
    assert_string_equal(
        eph_cli_render_label(rr, "sandbox", "sandbox.ready", NULL, "namespace sandbox ready", l),
        "Sandbox");
    assert_string_equal(
        eph_cli_render_label(rr, "sandbox", "sandbox.ready", NULL, "microVM ready", l), "MicroVM");
    /* data.backend decides, whatever the message says. */
    assert_string_equal(eph_cli_render_label(rr, "sandbox", "sandbox.ready", "gvisor",
                                             "namespace sandbox ready", l),
                        "gVisor");
    assert_string_equal(eph_cli_render_label(rr, "sandbox", "sandbox.ready", "namespaces",
                                             "gVisor sandbox ready", l),
                        "Sandbox");
    assert_string_equal(eph_cli_render_label(rr, "sandbox", "sandbox.ready", "microvm", "ready", l),
                        "MicroVM");
    assert_string_equal(eph_cli_render_label(NULL, "run", "run.failed", NULL, NULL, l), "Failed");
    assert_string_equal(eph_cli_render_label(NULL, "run", "run.timed_out", NULL, NULL, l),
                        "Timed out");
    assert_string_equal(eph_cli_render_label(NULL, "run", "run.budget_exhausted", NULL, NULL, l),
                        "Budget exhausted");
    assert_string_equal(eph_cli_render_label(NULL, "run", "run.cancelled", NULL, NULL, l),
                        "Cancelled");
    assert_string_equal(eph_cli_render_label(NULL, "run", "run.completed", NULL, NULL, l),
                        "Completed");
    assert_string_equal(eph_cli_render_label(NULL, "run", "run.queued", NULL, NULL, l), "Queued");
    assert_string_equal(eph_cli_render_label(NULL, "worker", "worker.destroyed", NULL, NULL, l),
                        "Worker destroyed");
    assert_string_equal(eph_cli_render_label(NULL, "worker", "worker.other", NULL, NULL, l),
                        "Worker");
    assert_string_equal(eph_cli_render_label(NULL, "web", "web.request", NULL, NULL, l), "Web");
    assert_string_equal(
        eph_cli_render_label(NULL, "connection", "connection.request", NULL, NULL, l),
        "Connection");
    assert_string_equal(eph_cli_render_label(NULL, "model", "model.call", NULL, NULL, l), "Model");
    /* Unknown: a plain word, whatever the server sent. */
    assert_string_equal(eph_cli_render_label(NULL, "broker_x", "broker.deny", NULL, NULL, l),
                        "Broker x");
    assert_string_equal(eph_cli_render_label(NULL, "\033[31mred", NULL, NULL, NULL, l), "31mred");
    assert_string_equal(eph_cli_render_label(NULL, NULL, NULL, NULL, NULL, l), "Event");
    assert_string_equal(
        eph_cli_render_label(NULL, "averyveryveryverylongsourcename", NULL, NULL, NULL, l),
        "Averyveryveryver");
    assert_string_equal(eph_cli_render_label(NULL, "run", "run.weird_state", NULL, NULL, l),
                        "Weird state");
}

/* A resumed stream repeats events: each seq is printed once. */
static void test_dedupe_by_seq(void **state)
{
    ev("{\"seq\":1,\"t\":0,\"source\":\"queue\",\"type\":\"run.queued\",\"message\":\"a\"}");
    ev("{\"seq\":2,\"t\":1,\"source\":\"shell\",\"type\":\"shell.command\",\"message\":\"b\"}");
    ev("{\"seq\":1,\"t\":0,\"source\":\"queue\",\"type\":\"run.queued\",\"message\":\"a\"}");
    ev("{\"seq\":2,\"t\":1,\"source\":\"shell\",\"type\":\"shell.command\",\"message\":\"b\"}");
    ev("{\"seq\":3,\"t\":2,\"source\":\"shell\",\"type\":\"shell.command\",\"message\":\"c\"}");
    assert_int_equal(r.printed, 3);
    assert_string_equal(text(), "   0.00  Queued            a\n"
                                "   1.00  Shell             b\n"
                                "   2.00  Shell             c\n");
}

static void test_missing_and_bad_fields(void **state)
{
    ev("{}");
    ev("{\"t\":\"soon\",\"type\":\"shell.command\",\"source\":\"shell\"}");
    ev("{\"t\":-1,\"source\":7,\"message\":null}");
    ev("{\"t\":1e300,\"seq\":\"x\",\"message\":\"m\"}");
    assert_string_equal(text(), "      ?  Event             \n"
                                "      ?  Shell             shell.command\n"
                                "      ?  Event             \n"
                                "      ?  Event             m\n");
    assert_int_equal(eph_cli_render_event_json(&r, "[1,2]", 5), -EPROTO);
    assert_int_equal(eph_cli_render_event_json(&r, "{\"seq\":", 7), -EPROTO);
    assert_int_equal(eph_cli_render_event_json(&r, "", 0), -EPROTO);
    assert_int_equal(r.last_seq, -1);
}

/* A model or a sandbox writes these messages: none may reach the terminal as control codes. */
static void test_hostile_message(void **state)
{
    ev("{\"seq\":1,\"t\":1,\"source\":\"shell\",\"type\":\"shell.command\","
       "\"message\":\"$ echo \\u001b[2J\\u001b]0;pwned\\u0007 \\u009b31m \\u202eevil \\r\\n\\tx "
       "\\u007f\"}");
    const char *s = text();
    assert_null(strchr(s, '\033'));
    assert_null(strchr(s, '\a'));
    assert_null(strchr(s, '\r'));
    assert_null(strstr(s, "\xc2\x9b"));
    assert_null(strstr(s, "\xe2\x80\xae"));
    assert_string_equal(s,
                        "   1.00  Shell             $ echo \\x1b[2J\\x1b]0;pwned\\x07 \\u009b31m "
                        "\\u202eevil \\r\\n x \\x7f\n");
}

static void test_text_multiline_and_cut(void **state)
{
    eph_cli_render_text(out, "line 1\n\tline 2 \033[0m ünïcødé\n", true, 0);
    assert_string_equal(text(), "line 1\n\tline 2 \\x1b[0m ünïcødé\n");
    reset_out(state);
    /* Cut at a character boundary: "é" is two bytes and does not fit in 3. */
    eph_cli_render_text(out, "abé", false, 3);
    assert_string_equal(text(), "ab…");
    reset_out(state);
    /* Invalid UTF-8 (overlong, surrogate, truncated) is shown as bytes. */
    eph_cli_render_text(out,
                        "a\xc0\xaf"
                        "b\xed\xa0\x80"
                        "c\xe2\x82",
                        false, 0);
    assert_string_equal(text(), "a\\xc0\\xafb\\xed\\xa0\\x80c\\xe2\\x82");
}

static void test_long_message_cut(void **state)
{
    size_t n = EPH_CLI_MESSAGE_MAX * 3;
    char *json = malloc(n + 64);
    assert_non_null(json);
    int k = snprintf(json, 64, "{\"seq\":1,\"t\":1,\"source\":\"shell\",\"message\":\"");
    memset(json + k, 'a', n);
    strcpy(json + k + n, "\"}");
    ev(json);
    free(json);
    const char *s = text();
    assert_true(strlen(s) < EPH_CLI_MESSAGE_MAX + 40);
    assert_non_null(strstr(s, "a…\n"));
}

static void test_color(void **state)
{
    r.color = true;
    ev("{\"seq\":1,\"t\":0,\"source\":\"run\",\"type\":\"run.completed\",\"message\":\"ok\"}");
    assert_non_null(strstr(text(), "\033[1;32mCompleted"));
    /* NO_COLOR wins even on a terminal; a memory stream is no terminal anyway. */
    setenv("NO_COLOR", "1", 1);
    assert_false(eph_cli_color_wanted(out));
    unsetenv("NO_COLOR");
    assert_false(eph_cli_color_wanted(out));
}

static json_t *load(const char *s)
{
    json_error_t e;
    json_t *j = json_loads(s, 0, &e);
    assert_non_null(j);
    return j;
}

static void test_cost_line(void **state)
{
    json_t *run =
        load("{\"cost\":{\"reserved_micros\":40000,\"model_micros\":330,\"web_micros\":0,"
             "\"compute_micros\":3200,\"charged_micros\":3530,\"released_micros\":36470}}");
    char line[128];
    assert_int_equal(eph_cli_render_cost_line(run, line, sizeof(line)), 0);
    assert_string_equal(line, "Model $0.00033 · Web $0.00 · Compute $0.0032");
    json_decref(run);
    /* A sandbox's cost has no model part, and its line none either. */
    run = load("{\"cost\":{\"web_micros\":0,\"compute_micros\":2540}}");
    assert_int_equal(eph_cli_render_cost_line(run, line, sizeof(line)), 0);
    assert_string_equal(line, "Web $0.00 · Compute $0.00254");
    json_decref(run);
    run = load("{\"cost\":null}");
    assert_int_equal(eph_cli_render_cost_line(run, line, sizeof(line)), -ENOENT);
    json_decref(run);
    run = load("{\"cost\":{}}");
    assert_int_equal(eph_cli_render_cost_line(run, line, sizeof(line)), -ENOENT);
    json_decref(run);
}

static void test_result(void **state)
{
    json_t *run = load(
        "{\"id\":\"run_de9af30ebaaa50ab76819bb536239c61\",\"model\":\"openai/gpt-6-luna\","
        "\"status\":\"completed\",\"result\":\"1. primes: 2 3 5\\nThe network call did not "
        "succeed.\","
        "\"error\":null,\"cost\":{\"model_micros\":330,\"web_micros\":0,\"compute_micros\":3200}}");
    eph_cli_render_header(&r, run);
    eph_cli_render_result(&r, run);
    assert_string_equal(text(), "run_de9af30ebaaa50ab76819bb536239c61 · openai/gpt-6-luna\n\n"
                                "\n1. primes: 2 3 5\nThe network call did not succeed.\n\n"
                                "Model $0.00033 · Web $0.00 · Compute $0.0032\n");
    json_decref(run);
}

static void test_result_error(void **state)
{
    json_t *run =
        load("{\"status\":\"timed_out\",\"result\":null,\"error\":{\"type\":\"run_error\","
             "\"code\":\"timeout\",\"message\":\"the run exceeded its 120 s time limit\"},"
             "\"cost\":{\"model_micros\":0,\"web_micros\":0,\"compute_micros\":28800}}");
    eph_cli_render_result(&r, run);
    assert_string_equal(text(), "\nTimed out: the run exceeded its 120 s time limit (timeout)\n\n"
                                "Model $0.00 · Web $0.00 · Compute $0.0288\n");
    json_decref(run);
}

static void test_status(void **state)
{
    assert_int_equal(eph_cli_status_exit("completed"), 0);
    assert_int_equal(eph_cli_status_exit("failed"), 1);
    assert_int_equal(eph_cli_status_exit("timed_out"), 1);
    assert_int_equal(eph_cli_status_exit("budget_exhausted"), 1);
    assert_int_equal(eph_cli_status_exit("cancelled"), 1);
    assert_int_equal(eph_cli_status_exit("running"), -EAGAIN);
    assert_int_equal(eph_cli_status_exit("queued"), -EAGAIN);
    assert_int_equal(eph_cli_status_exit(NULL), -EAGAIN);
    assert_int_equal(eph_cli_status_exit("bogus"), -EAGAIN);
    /* A sandbox's: stopped is its normal end, ready is live. */
    assert_int_equal(eph_cli_status_exit("stopped"), 0);
    assert_int_equal(eph_cli_status_exit("ready"), -EAGAIN);
    assert_string_equal(eph_cli_status_label("ready"), "Ready");
    char l[EPH_CLI_LABEL_MAX];
    assert_string_equal(eph_cli_render_label(NULL, "sandbox", "sandbox.timed_out", NULL, "x", l),
                        "Timed out");
    assert_string_equal(eph_cli_render_label(NULL, "sandbox", "sandbox.stopped", NULL, "x", l),
                        "Stopped");
    assert_string_equal(eph_cli_render_label(NULL, "sandbox", "sandbox.ready", NULL, "x", l),
                        "Sandbox");
    assert_string_equal(eph_cli_status_label("budget_exhausted"), "Budget exhausted");
    assert_null(eph_cli_status_label("bogus"));
}

static void test_time_and_duration(void **state)
{
    int64_t a, b;
    assert_int_equal(eph_cli_time_parse("2026-10-07T15:01:48.120Z", &a), 0);
    assert_int_equal(eph_cli_time_parse("2026-10-07T15:02:04.360Z", &b), 0);
    assert_int_equal(b - a, 16240);
    assert_int_equal(eph_cli_time_parse("1970-01-01T00:00:01Z", &a), 0);
    assert_int_equal(a, 1000);
    assert_int_equal(eph_cli_time_parse("1970-01-01T00:00:01.5Z", &a), 0);
    assert_int_equal(a, 1500);
    assert_int_equal(eph_cli_time_parse("2026-10-07 15:01:48Z", &a), -EINVAL);
    assert_int_equal(eph_cli_time_parse("2026-13-07T15:01:48Z", &a), -EINVAL);
    assert_int_equal(eph_cli_time_parse("2026-10-07T15:01:48.Z", &a), -EINVAL);
    assert_int_equal(eph_cli_time_parse("2026-10-07T15:01:48", &a), -EINVAL);
    assert_int_equal(eph_cli_time_parse(NULL, &a), -EINVAL);
    char d[32];
    assert_string_equal(eph_cli_format_duration(850, d, sizeof(d)), "850 ms");
    assert_string_equal(eph_cli_format_duration(16240, d, sizeof(d)), "16.24 s");
    assert_string_equal(eph_cli_format_duration(125000, d, sizeof(d)), "2 min 05 s");
    assert_string_equal(eph_cli_format_duration(3720000, d, sizeof(d)), "1 h 02 min");
    assert_string_equal(eph_cli_format_duration(-5, d, sizeof(d)), "0 ms");
}

static void test_cost_bar(void **state)
{
    char b[128];
    assert_string_equal(eph_cli_render_cost_bar(3530, 40000, 10, b, sizeof(b)), "[█░░░░░░░░░]");
    assert_string_equal(eph_cli_render_cost_bar(0, 40000, 4, b, sizeof(b)), "[░░░░]");
    assert_string_equal(eph_cli_render_cost_bar(40000, 40000, 4, b, sizeof(b)), "[████]");
    assert_string_equal(eph_cli_render_cost_bar(99999, 40000, 4, b, sizeof(b)), "[████]");
    assert_string_equal(eph_cli_render_cost_bar(20000, 40000, 4, b, sizeof(b)), "[██░░]");
    assert_string_equal(eph_cli_render_cost_bar(INT64_MAX - 1, INT64_MAX, 4, b, sizeof(b)),
                        "[████]");
    assert_string_equal(eph_cli_render_cost_bar(5, 0, 2, b, sizeof(b)), "[░░]");
    assert_string_equal(eph_cli_render_cost_bar(5, 10, 20, b, 8), ""); /* does not fit */
}

/* A running command's output (shell.output) shows under it line by line as it comes: a line cut
 * between two events is shown whole once its end comes, stderr's apart from stdout's, what is
 * left of a line before the next event, and hostile bytes escaped. */
static void test_live_output(void **state)
{
    (void)state;
    ev("{\"seq\":5,\"t\":1.5,\"source\":\"shell\",\"type\":\"shell.output\",\"message\":\"$ make\","
       "\"data\":{\"call\":\"c1\",\"stream\":\"stdout\",\"text\":\"cc -c a.c\\ncc -c "
       "b\",\"offset\":0}}");
    ev("{\"seq\":6,\"t\":1.7,\"source\":\"shell\",\"type\":\"shell.output\",\"message\":\"$ make\","
       "\"data\":{\"call\":\"c1\",\"stream\":\"stderr\",\"text\":\"warn\\u001b[2J\\n\",\"offset\":"
       "0}}");
    ev("{\"seq\":7,\"t\":1.9,\"source\":\"shell\",\"type\":\"shell.output\",\"message\":\"$ make\","
       "\"data\":{\"call\":\"c1\",\"stream\":\"stdout\",\"text\":\".c\\nlinking\",\"offset\":17}}");
    ev("{\"seq\":8,\"t\":2.5,\"source\":\"shell\",\"type\":\"shell.command\",\"message\":\"$ "
       "make\"}");
    assert_string_equal(text(), "                           │ cc -c a.c\n"
                                "                           │ warn\\x1b[2J\n"
                                "                           │ cc -c b.c\n"
                                "                           │ linking\n"
                                "   2.50  Shell             $ make\n");
    /* An event seen again (a resumed stream) is not shown twice. */
    ev("{\"seq\":7,\"t\":1.9,\"source\":\"shell\",\"type\":\"shell.output\",\"message\":\"$ make\","
       "\"data\":{\"call\":\"c1\",\"stream\":\"stdout\",\"text\":\"again\\n\",\"offset\":17}}");
    assert_null(strstr(text(), "again"));
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_seed_timeline),
        T(test_live_output),
        T(test_labels),
        T(test_dedupe_by_seq),
        T(test_missing_and_bad_fields),
        T(test_hostile_message),
        T(test_text_multiline_and_cut),
        T(test_long_message_cut),
        T(test_color),
        T(test_cost_line),
        T(test_result),
        T(test_result_error),
        T(test_status),
        T(test_time_and_duration),
        T(test_cost_bar),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
