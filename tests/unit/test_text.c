/* The formatting helpers of common/text.c: whole text or an error, and cuts at a character. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/text.h"

static void test_format_fits(void **state)
{
    char buf[8];
    assert_int_equal(eph_text_format(buf, sizeof(buf), "%s/%d", "abc", 42), 0);
    assert_string_equal(buf, "abc/42");
    /* exactly full: seven characters and the NUL */
    assert_int_equal(eph_text_format(buf, sizeof(buf), "%s", "1234567"), 0);
    assert_string_equal(buf, "1234567");
}

static void test_format_too_long_is_an_error(void **state)
{
    char buf[8];
    assert_int_equal(eph_text_format(buf, sizeof(buf), "%s", "12345678"), -ENAMETOOLONG);
    assert_int_equal(eph_text_format(buf, sizeof(buf), "/var/%s/x", "cache"), -ENAMETOOLONG);
}

static void test_format_cut_keeps_characters_whole(void **state)
{
    char buf[6];
    /* "ab" then "é" (2 bytes) then "€" (3 bytes): 5 bytes fit, the euro sign would be split */
    eph_text_format_cut(buf, sizeof(buf), "ab%s", "\xc3\xa9\xe2\x82\xac");
    assert_string_equal(buf, "ab\xc3\xa9");
    /* a cut right after a whole character keeps it */
    eph_text_format_cut(buf, sizeof(buf), "%s", "abc\xc3\xa9xyz");
    assert_string_equal(buf, "abc\xc3\xa9");
    /* a cut inside the last character's lead byte alone */
    eph_text_format_cut(buf, sizeof(buf), "%s", "abcd\xe2\x82\xac");
    assert_string_equal(buf, "abcd");
    /* ASCII is cut at the size */
    eph_text_format_cut(buf, sizeof(buf), "%s", "abcdefgh");
    assert_string_equal(buf, "abcde");
    /* what fits is left alone */
    eph_text_format_cut(buf, sizeof(buf), "%d", 12);
    assert_string_equal(buf, "12");
}

static void test_hex_value(void **state)
{
    (void)state;
    assert_int_equal(eph_text_hex_value('0'), 0);
    assert_int_equal(eph_text_hex_value('9'), 9);
    assert_int_equal(eph_text_hex_value('a'), 10);
    assert_int_equal(eph_text_hex_value('F'), 15);
    const unsigned char bad[] = {'g', 'G', '/', ':', '@', '`', ' ', 0, 0xff, 0x80};
    for (size_t i = 0; i < sizeof(bad); i++)
        assert_int_equal(eph_text_hex_value(bad[i]), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hex_value),
        cmocka_unit_test(test_format_fits),
        cmocka_unit_test(test_format_too_long_is_an_error),
        cmocka_unit_test(test_format_cut_keeps_characters_whole),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
