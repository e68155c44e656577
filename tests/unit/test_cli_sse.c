/*
 * test_cli_sse.c - the client's event-stream parser against well-formed and hostile streams:
 * chunks split anywhere, CRLF and CR endings, comments, missing fields, overlong lines and events.
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

#include "cli/sse.h"

#define MAX_EVENTS 16

struct seen {
    size_t n;
    char type[MAX_EVENTS][64];
    char data[MAX_EVENTS][256];
    size_t data_len[MAX_EVENTS];
    char id[MAX_EVENTS][EPH_CLI_SSE_ID_MAX + 1];
    int stop_at; /* return 42 from the callback for this event number (1-based), 0 never */
};

static int on_event(void *arg, const struct eph_cli_sse_event *ev)
{
    struct seen *s = arg;
    assert_true(s->n < MAX_EVENTS);
    snprintf(s->type[s->n], sizeof(s->type[0]), "%s", ev->type);
    assert_true(ev->data_len < sizeof(s->data[0]));
    memcpy(s->data[s->n], ev->data, ev->data_len);
    s->data[s->n][ev->data_len] = '\0';
    assert_int_equal(ev->data[ev->data_len], '\0');
    s->data_len[s->n] = ev->data_len;
    snprintf(s->id[s->n], sizeof(s->id[0]), "%s", ev->id);
    s->n++;
    return s->stop_at && (int)s->n == s->stop_at ? 42 : 0;
}

static struct eph_cli_sse parser;
static struct seen seen;

static int setup(void **state)
{
    memset(&seen, 0, sizeof(seen));
    eph_cli_sse_init(&parser, 1024, 4096, on_event, &seen);
    return 0;
}

static int teardown(void **state)
{
    eph_cli_sse_release(&parser);
    return 0;
}

static int feed(const char *s)
{
    return eph_cli_sse_feed(&parser, s, strlen(s));
}

static const char two_events[] =
    "id: 1\nevent: run.queued\ndata: {\"seq\":1,\"message\":\"budget of $0.04 reserved\"}\n\n"
    ": keep-alive\n\n"
    "id: 2\r\nevent: sandbox.ready\r\ndata: {\"seq\":2}\r\n\r\n";

static void check_two_events(void)
{
    assert_int_equal(seen.n, 2);
    assert_string_equal(seen.type[0], "run.queued");
    assert_string_equal(seen.data[0], "{\"seq\":1,\"message\":\"budget of $0.04 reserved\"}");
    assert_string_equal(seen.id[0], "1");
    assert_string_equal(seen.type[1], "sandbox.ready");
    assert_string_equal(seen.data[1], "{\"seq\":2}");
    assert_string_equal(seen.id[1], "2");
    assert_int_equal(parser.comments, 1);
}

static void test_basic(void **state)
{
    assert_int_equal(feed(two_events), 0);
    check_two_events();
}

/* Every split into two chunks, and one byte at a time, gives the same events. */
static void test_split_anywhere(void **state)
{
    size_t n = strlen(two_events);
    for (size_t cut = 0; cut <= n; cut++) {
        eph_cli_sse_release(&parser);
        setup(state);
        assert_int_equal(eph_cli_sse_feed(&parser, two_events, cut), 0);
        assert_int_equal(eph_cli_sse_feed(&parser, two_events + cut, n - cut), 0);
        check_two_events();
    }
    eph_cli_sse_release(&parser);
    setup(state);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(eph_cli_sse_feed(&parser, two_events + i, 1), 0);
    check_two_events();
}

/* A CRLF split between chunks ends one line, not two (which would dispatch early). */
static void test_crlf_split(void **state)
{
    assert_int_equal(feed("data: a\r"), 0);
    assert_int_equal(feed("\ndata: b\r"), 0);
    assert_int_equal(seen.n, 0);
    /* The LF completes "b\r"; the CR after it is the empty line that dispatches. */
    assert_int_equal(feed("\n\r"), 0);
    assert_int_equal(seen.n, 1);
    assert_string_equal(seen.data[0], "a\nb");
    /* And the LF of that CRLF, arriving alone, is not a second empty line. */
    assert_int_equal(feed("\n"), 0);
    assert_int_equal(feed("data: c\n"), 0);
    assert_int_equal(seen.n, 1);
    assert_int_equal(feed("\n"), 0);
    assert_int_equal(seen.n, 2);
}

static void test_lone_cr(void **state)
{
    assert_int_equal(feed("event: x\rdata: 1\r\rdata: 2\r\r"), 0);
    assert_int_equal(seen.n, 2);
    assert_string_equal(seen.type[0], "x");
    assert_string_equal(seen.data[0], "1");
    assert_string_equal(seen.type[1], "message"); /* the type does not carry over */
    assert_string_equal(seen.data[1], "2");
}

static void test_comments_only(void **state)
{
    assert_int_equal(feed(":\n: keep-alive\n\n:x\n\n\n\n"), 0);
    assert_int_equal(seen.n, 0);
    assert_int_equal(parser.comments, 3);
}

static void test_missing_fields(void **state)
{
    /* No data: nothing dispatched, and the type is forgotten. */
    assert_int_equal(feed("event: lonely\nid: 7\n\n"), 0);
    assert_int_equal(seen.n, 0);
    assert_string_equal(parser.id, "7");
    /* "data" without a colon is an empty data line: dispatched with empty data. */
    assert_int_equal(feed("data\n\n"), 0);
    assert_int_equal(seen.n, 1);
    assert_string_equal(seen.type[0], "message");
    assert_string_equal(seen.data[0], "");
    assert_string_equal(seen.id[0], "7"); /* the id persists */
    /* No space after the colon; only one space is stripped. */
    assert_int_equal(feed("data:x\ndata:  y\n\n"), 0);
    assert_string_equal(seen.data[1], "x\n y");
    /* Unknown fields and bad retry values are ignored; a good retry is kept. */
    assert_int_equal(feed("foo: bar\nretry: 12x\nretry: 2500\nDATA: no\ndata: z\n\n"), 0);
    assert_int_equal(seen.n, 3);
    assert_string_equal(seen.data[2], "z");
    assert_int_equal(parser.retry_ms, 2500);
    /* An empty id resets it. */
    assert_int_equal(feed("id\ndata: w\n\n"), 0);
    assert_string_equal(seen.id[3], "");
}

static void test_bad_ids_ignored(void **state)
{
    assert_int_equal(feed("id: 5\n"), 0);
    static const char nul_id[] = "id: 6\0evil\ndata: a\n\n";
    assert_int_equal(eph_cli_sse_feed(&parser, nul_id, sizeof(nul_id) - 1), 0);
    assert_int_equal(seen.n, 1);
    assert_string_equal(seen.id[0], "5");
    char line[EPH_CLI_SSE_ID_MAX + 16];
    memset(line, '9', sizeof(line));
    memcpy(line, "id: ", 4);
    line[sizeof(line) - 2] = '\n';
    line[sizeof(line) - 1] = '\n';
    assert_int_equal(eph_cli_sse_feed(&parser, line, sizeof(line)), 0);
    assert_string_equal(parser.id, "5");
}

static void test_nul_in_data(void **state)
{
    static const char s[] = "data: a\0b\n\n";
    assert_int_equal(eph_cli_sse_feed(&parser, s, sizeof(s) - 1), 0);
    assert_int_equal(seen.n, 1);
    assert_int_equal(seen.data_len[0], 3);
    assert_memory_equal(seen.data[0], "a\0b", 3);
}

static void test_overlong_line(void **state)
{
    char big[1500];
    memset(big, 'x', sizeof(big));
    memcpy(big, "data: ", 6);
    /* Fed in pieces without a line end: the cap still holds. */
    assert_int_equal(eph_cli_sse_feed(&parser, big, 700), 0);
    assert_int_equal(eph_cli_sse_feed(&parser, big + 700, 700), -EMSGSIZE);
    /* Sticky: the stream is unusable until reset. */
    assert_int_equal(feed("\n\ndata: ok\n\n"), -EMSGSIZE);
    assert_int_equal(seen.n, 0);
    eph_cli_sse_reset(&parser);
    assert_int_equal(feed("data: ok\n\n"), 0);
    assert_int_equal(seen.n, 1);
    assert_string_equal(seen.data[0], "ok");
}

static void test_overlong_comment(void **state)
{
    char big[2048];
    memset(big, 'k', sizeof(big));
    big[0] = ':';
    assert_int_equal(eph_cli_sse_feed(&parser, big, sizeof(big)), -EMSGSIZE);
}

static void test_overlong_event(void **state)
{
    /* Short lines, but too many of them for one event. */
    int rc = 0;
    for (int i = 0; i < 100 && rc == 0; i++)
        rc = feed("data: 0123456789012345678901234567890123456789012345678901234567890123\n");
    assert_int_equal(rc, -EMSGSIZE);
    assert_int_equal(seen.n, 0);
}

static void test_bom(void **state)
{
    assert_int_equal(feed("\xEF\xBB"), 0);
    assert_int_equal(feed("\xBF"
                          "data: 1\n\n"),
                     0);
    assert_int_equal(seen.n, 1);
    assert_string_equal(seen.data[0], "1");
    /* Only at the very start: later it is part of a field name, so the line is ignored. */
    assert_int_equal(feed("\xEF\xBB\xBF"
                          "data: 2\n\n"),
                     0);
    assert_int_equal(seen.n, 1);
}

static void test_unterminated_event_discarded(void **state)
{
    assert_int_equal(feed("data: partial\n"), 0);
    assert_int_equal(seen.n, 0);
    /* A reconnection forgets it. */
    eph_cli_sse_reset(&parser);
    assert_int_equal(feed("\n"), 0);
    assert_int_equal(seen.n, 0);
}

static void test_callback_stops(void **state)
{
    seen.stop_at = 1;
    assert_int_equal(feed("data: 1\n\ndata: 2\n\n"), 42);
    assert_int_equal(seen.n, 1);
}

/* Random bytes in random chunks: no crash, no overrun (run under ASan), and always a defined
 * answer. */
static void test_random_garbage(void **state)
{
    uint32_t x = 12345;
    char buf[4096];
    for (int round = 0; round < 200; round++) {
        eph_cli_sse_release(&parser);
        setup(state);
        size_t n = 0;
        while (n < sizeof(buf)) {
            x = x * 1103515245u + 12345u;
            unsigned r = (x >> 16) & 0xff;
            /* Mostly the bytes that matter to the parser. */
            static const char alphabet[] = "data:id event\r\n\n\n: retry 9";
            buf[n++] = r < 200 ? alphabet[r % (sizeof(alphabet) - 1)] : (char)r;
        }
        size_t off = 0;
        while (off < n) {
            x = x * 1103515245u + 12345u;
            size_t chunk = 1 + (x >> 16) % 97;
            if (chunk > n - off)
                chunk = n - off;
            int rc = eph_cli_sse_feed(&parser, buf + off, chunk);
            assert_true(rc == 0 || rc == -EMSGSIZE);
            off += chunk;
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_basic, setup, teardown),
        cmocka_unit_test_setup_teardown(test_split_anywhere, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crlf_split, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lone_cr, setup, teardown),
        cmocka_unit_test_setup_teardown(test_comments_only, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_fields, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_ids_ignored, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nul_in_data, setup, teardown),
        cmocka_unit_test_setup_teardown(test_overlong_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_overlong_comment, setup, teardown),
        cmocka_unit_test_setup_teardown(test_overlong_event, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bom, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unterminated_event_discarded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_callback_stops, setup, teardown),
        cmocka_unit_test_setup_teardown(test_random_garbage, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
