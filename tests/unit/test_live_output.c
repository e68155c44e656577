/* The coalescer of shell.output (agent/live_output.c): a stream's first text 100 ms after its
 * first byte (a command that ends sooner leaves it all to the end), then one text per stream per
 * 250 ms, or each 8 KiB, at most the cap per command, valid UTF-8 with a cut character carried to
 * the next text. Time is passed in: nothing here sleeps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "agent/live_output.h"

#define MS (1000u * 1000u)
#define FIRST EPH_LIVE_OUTPUT_FIRST_NS
#define MAX_TEXTS 512

struct seen {
    int n;
    int stream[MAX_TEXTS];
    uint64_t offset[MAX_TEXTS];
    size_t len[MAX_TEXTS];
    char all[2][1 << 20]; /* each stream's texts, concatenated */
    size_t all_len[2];
    int fail_after; /* > 0: the emit that many fails */
};

static int record(void *arg, int stream, const char *text, size_t len, uint64_t offset)
{
    struct seen *s = arg;
    assert_true(stream == 1 || stream == 2);
    assert_true(len > 0);
    assert_int_equal(strlen(text), len);
    assert_true(s->n < MAX_TEXTS);
    s->stream[s->n] = stream;
    s->offset[s->n] = offset;
    s->len[s->n] = len;
    s->n++;
    memcpy(s->all[stream - 1] + s->all_len[stream - 1], text, len);
    s->all_len[stream - 1] += len;
    s->all[stream - 1][s->all_len[stream - 1]] = '\0';
    return s->fail_after && s->n == s->fail_after ? -5 : 0;
}

static struct seen *seen_new(void)
{
    struct seen *s = calloc(1, sizeof(*s));
    assert_non_null(s);
    return s;
}

static void test_first_piece_waits_then_every_250_ms(void **state)
{
    struct seen *s = seen_new();
    struct eph_live_output lo;
    eph_live_output_init(&lo, 65536, record, s);
    uint64_t t0 = 1000 * MS;
    eph_live_output_feed(&lo, 1, "tick 1\n", 7, t0);
    assert_int_equal(s->n, 0); /* held: a command that ends now takes it with its own event */
    eph_live_output_tick(&lo, t0 + FIRST - 1);
    assert_int_equal(s->n, 0);
    uint64_t t = t0 + FIRST;
    eph_live_output_tick(&lo, t);
    assert_int_equal(s->n, 1);
    assert_int_equal(s->offset[0], 0);
    /* more within 250 ms is held back, whatever the number of pieces */
    eph_live_output_feed(&lo, 1, "a", 1, t + 10 * MS);
    eph_live_output_feed(&lo, 1, "b", 1, t + 100 * MS);
    eph_live_output_tick(&lo, t + 249 * MS);
    assert_int_equal(s->n, 1);
    /* a tick at 250 ms emits what waited, as one text */
    eph_live_output_tick(&lo, t + 250 * MS);
    assert_int_equal(s->n, 2);
    assert_int_equal(s->offset[1], 7);
    assert_int_equal(s->len[1], 2);
    /* a piece that comes after the interval goes at once */
    eph_live_output_feed(&lo, 1, "c\n", 2, t + 600 * MS);
    assert_int_equal(s->n, 3);
    assert_int_equal(s->offset[2], 9);
    assert_string_equal(s->all[0], "tick 1\nabc\n");
    eph_live_output_finish(&lo);
    assert_int_equal(s->n, 3);
    free(s);
}

static void test_streams_are_coalesced_apart(void **state)
{
    struct seen *s = seen_new();
    struct eph_live_output lo;
    eph_live_output_init(&lo, 65536, record, s);
    uint64_t t = 5 * MS;
    eph_live_output_feed(&lo, 1, "out", 3, t);
    eph_live_output_feed(&lo, 2, "err", 3, t + MS); /* stderr's first waits from its own byte */
    eph_live_output_tick(&lo, t + FIRST);
    assert_int_equal(s->n, 1);
    assert_int_equal(s->stream[0], 1);
    eph_live_output_tick(&lo, t + FIRST + MS);
    assert_int_equal(s->n, 2);
    assert_int_equal(s->stream[1], 2);
    assert_int_equal(s->offset[1], 0);
    eph_live_output_feed(&lo, 2, "2", 1, t + FIRST + 2 * MS);
    eph_live_output_feed(&lo, 3, "ignored", 7, t + FIRST + 2 * MS); /* not a stream */
    assert_int_equal(s->n, 2);
    /* the end emits everything held, without waiting */
    eph_live_output_finish(&lo);
    assert_int_equal(s->n, 3);
    assert_string_equal(s->all[1], "err2");
    assert_int_equal(s->offset[2], 3);
    free(s);
}

static void test_8_kib_goes_without_waiting(void **state)
{
    struct seen *s = seen_new();
    struct eph_live_output lo;
    eph_live_output_init(&lo, 1 << 20, record, s);
    char *big = malloc(20000);
    memset(big, 'y', 20000);
    eph_live_output_feed(&lo, 1, "x", 1, 0);
    uint64_t t = FIRST;
    eph_live_output_tick(&lo, t); /* the first text: the interval starts */
    assert_int_equal(s->n, 1);
    /* 20,000 bytes at the same instant: two full chunks at once, the rest waits */
    eph_live_output_feed(&lo, 1, big, 20000, t + MS);
    assert_int_equal(s->n, 3);
    assert_int_equal(s->len[1], EPH_LIVE_OUTPUT_CHUNK);
    assert_int_equal(s->len[2], EPH_LIVE_OUTPUT_CHUNK);
    assert_int_equal(s->offset[1], 1);
    assert_int_equal(s->offset[2], 1 + EPH_LIVE_OUTPUT_CHUNK);
    eph_live_output_tick(&lo, t + 2 * MS);
    assert_int_equal(s->n, 3);
    eph_live_output_tick(&lo, t + 251 * MS);
    assert_int_equal(s->n, 4);
    assert_int_equal(s->len[3], 20001 - 1 - 2 * EPH_LIVE_OUTPUT_CHUNK);
    assert_int_equal(s->all_len[0], 20001);
    free(big);
    free(s);
}

static void test_cap_holds_for_a_flood(void **state)
{
    struct seen *s = seen_new();
    struct eph_live_output lo;
    eph_live_output_init(&lo, 65536, record, s);
    char piece[65536];
    for (size_t i = 0; i < sizeof(piece); i++)
        piece[i] = i % 2 ? '\n' : 'y';
    uint64_t t = 0;
    for (int i = 0; i < 16; i++) /* 1 MiB, as fast as it comes */
        eph_live_output_feed(&lo, i % 2 + 1, piece, sizeof(piece), t + (uint64_t)i * MS);
    eph_live_output_tick(&lo, t + 10000 * MS);
    eph_live_output_finish(&lo);
    assert_int_equal(s->all_len[0] + s->all_len[1], 65536);
    /* in chunks: a flood is a few events */
    assert_true(s->n <= (int)(65536 / EPH_LIVE_OUTPUT_CHUNK + 2));
    free(s);

    /* a cap in the middle of a character keeps the text valid: the character is left out */
    s = seen_new();
    eph_live_output_init(&lo, 4, record, s);
    eph_live_output_feed(&lo, 1, "abc\xe2\x82\xac", 6, 0);
    eph_live_output_tick(&lo, FIRST);
    assert_int_equal(s->n, 1);
    assert_string_equal(s->all[0], "abc");
    eph_live_output_feed(&lo, 1, "more", 4, 1000 * MS);
    eph_live_output_finish(&lo);
    assert_int_equal(s->n, 1);
    free(s);

    /* a cap of 0: nothing at all */
    s = seen_new();
    eph_live_output_init(&lo, 0, record, s);
    eph_live_output_feed(&lo, 1, "abc", 3, 0);
    eph_live_output_finish(&lo);
    assert_int_equal(s->n, 0);
    free(s);
}

static void test_a_cut_character_is_carried(void **state)
{
    struct seen *s = seen_new();
    struct eph_live_output lo;
    eph_live_output_init(&lo, 65536, record, s);
    /* "é" (c3 a9) and "€" (e2 82 ac) split across pieces that each go at once */
    eph_live_output_feed(&lo, 1, "caf\xc3", 4, 0);
    eph_live_output_tick(&lo, FIRST);
    assert_int_equal(s->n, 1);
    assert_string_equal(s->all[0], "caf");
    eph_live_output_feed(&lo, 1, "\xa9 \xe2\x82", 4, FIRST + 300 * MS);
    assert_int_equal(s->n, 2);
    assert_int_equal(s->offset[1], 3); /* the é's first byte */
    eph_live_output_feed(&lo, 1, "\xac!", 2, FIRST + 600 * MS);
    assert_int_equal(s->n, 3);
    assert_int_equal(s->offset[2], 6);
    assert_string_equal(s->all[0], "caf\xc3\xa9 \xe2\x82\xac!");
    /* only the first bytes of a character: nothing to emit yet, even when due */
    eph_live_output_feed(&lo, 1, "\xf0\x9f", 2, FIRST + 900 * MS);
    eph_live_output_tick(&lo, FIRST + 2000 * MS);
    assert_int_equal(s->n, 3);
    eph_live_output_feed(&lo, 1, "\x98\x80", 2, FIRST + 2100 * MS);
    assert_int_equal(s->n, 4);
    assert_string_equal(s->all[0], "caf\xc3\xa9 \xe2\x82\xac!\xf0\x9f\x98\x80");
    /* a command that ends inside a character: the rest becomes U+FFFD, not bytes that are not
     * UTF-8 */
    eph_live_output_feed(&lo, 1, "\xe2\x82", 2, FIRST + 3000 * MS);
    eph_live_output_finish(&lo);
    assert_int_equal(s->n, 5);
    assert_string_equal(s->all[0] + s->all_len[0] - 6, "\xef\xbf\xbd\xef\xbf\xbd");
    free(s);
}

static void test_a_chunk_boundary_inside_a_character(void **state)
{
    /* 8,191 ASCII bytes and a 3-byte character: the chunk fills in the middle of it */
    struct seen *s = seen_new();
    struct eph_live_output lo;
    eph_live_output_init(&lo, 1 << 20, record, s);
    char buf[EPH_LIVE_OUTPUT_CHUNK + 2];
    memset(buf, 'a', EPH_LIVE_OUTPUT_CHUNK - 1);
    memcpy(buf + EPH_LIVE_OUTPUT_CHUNK - 1, "\xe2\x82\xac", 3);
    eph_live_output_feed(&lo, 1, "x", 1, 0);
    eph_live_output_tick(&lo, FIRST);
    eph_live_output_feed(&lo, 1, buf, sizeof(buf), FIRST + MS);
    assert_int_equal(s->n, 2);
    assert_int_equal(s->len[1], EPH_LIVE_OUTPUT_CHUNK - 1); /* up to the whole characters */
    eph_live_output_finish(&lo);
    assert_int_equal(s->all_len[0], 1 + sizeof(buf));
    assert_int_equal(memcmp(s->all[0] + 1, buf, sizeof(buf)), 0);
    free(s);
}

static void test_invalid_bytes_and_nul_are_replaced(void **state)
{
    struct seen *s = seen_new();
    struct eph_live_output lo;
    eph_live_output_init(&lo, 65536, record, s);
    eph_live_output_feed(&lo, 2, "a\xff\0b\x1b[2J", 8, 0);
    eph_live_output_tick(&lo, FIRST);
    assert_int_equal(s->n, 1);
    /* invalid byte and NUL as U+FFFD; a control character stays (JSON escapes it, and whoever
     * shows the text makes it safe, as for the shell.command's output) */
    assert_string_equal(s->all[1], "a\xef\xbf\xbd\xef\xbf\xbd"
                                   "b\x1b[2J");
    free(s);
}

/* A command that ends before its first text was due: nothing went out while it ran, and its end
 * emits each stream's output whole, once (the caller records them with the command's event). */
static void test_a_quick_command_leaves_it_all_to_its_end(void **state)
{
    struct seen *s = seen_new();
    struct eph_live_output lo;
    eph_live_output_init(&lo, 65536, record, s);
    eph_live_output_feed(&lo, 1, "/tmp/x\n", 7, 0);
    eph_live_output_feed(&lo, 2, "warn\n", 5, 2 * MS);
    eph_live_output_feed(&lo, 1, "worker\n", 7, 3 * MS);
    eph_live_output_tick(&lo, FIRST - 1);
    assert_int_equal(s->n, 0);
    eph_live_output_finish(&lo);
    assert_int_equal(s->n, 2);
    assert_string_equal(s->all[0], "/tmp/x\nworker\n");
    assert_string_equal(s->all[1], "warn\n");
    assert_int_equal(s->offset[0], 0);
    assert_int_equal(s->offset[1], 0);
    free(s);
}

static void test_a_failing_emit_stops_it(void **state)
{
    struct seen *s = seen_new();
    s->fail_after = 1;
    struct eph_live_output lo;
    eph_live_output_init(&lo, 65536, record, s);
    eph_live_output_feed(&lo, 1, "one", 3, 0);
    eph_live_output_feed(&lo, 1, "two", 3, 1000 * MS);
    eph_live_output_feed(&lo, 2, "three", 5, 2000 * MS);
    eph_live_output_finish(&lo);
    assert_int_equal(s->n, 1);
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_piece_waits_then_every_250_ms),
        cmocka_unit_test(test_a_quick_command_leaves_it_all_to_its_end),
        cmocka_unit_test(test_streams_are_coalesced_apart),
        cmocka_unit_test(test_8_kib_goes_without_waiting),
        cmocka_unit_test(test_cap_holds_for_a_flood),
        cmocka_unit_test(test_a_cut_character_is_carried),
        cmocka_unit_test(test_a_chunk_boundary_inside_a_character),
        cmocka_unit_test(test_invalid_bytes_and_nul_are_replaced),
        cmocka_unit_test(test_a_failing_emit_stops_it),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
