/* Output patterns (common/glob.c): what '*', '?' and '**' match, and the patterns refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/glob.h"

static void test_match(void **state)
{
    static const struct {
        const char *pattern, *path;
        bool match;
    } cases[] = {
        {"report.md", "report.md", true},
        {"report.md", "out/report.md", false},
        {"*.png", "chart.png", true},
        {"*.png", "out/chart.png", false}, /* '*' stays in its component */
        {"*.png", ".png", true},
        {"*.png", "chart.pngx", false},
        {"c?art.png", "chart.png", true},
        {"c?art.png", "cart.png", false},
        {"?", "/", false},
        {"out/*", "out/a", true},
        {"out/*", "out/a/b", false},
        {"out/**", "out/a", true},
        {"out/**", "out/a/b/c.txt", true},
        {"out/**", "out", true},
        {"out/**", "outx/a", false},
        {"**/*.png", "a.png", true},
        {"**/*.png", "a/b/c.png", true},
        {"**/*.png", "a/b/c.jpg", false},
        {"**", "anything/at/all", true},
        {"a/**/z", "a/z", true},
        {"a/**/z", "a/b/c/z", true},
        {"a/**/z", "a/b/c/y", false},
        {"*a*b*", "xxaxxbxx", true},
        {"*a*b*", "xxbxxaxx", false},
        {"a*", "", false},
        {"", "a", false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (eph_glob_match(cases[i].pattern, cases[i].path) != cases[i].match)
            fail_msg("'%s' against '%s': want %d", cases[i].pattern, cases[i].path, cases[i].match);
    }
}

static void test_pattern_errors(void **state)
{
    const char *good[] = {"report.md", "out/**", "*.png", "**/*.txt", "a?c", "..a/b..c"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        assert_null(eph_glob_pattern_error(good[i], strlen(good[i])));
    const char *bad[] = {"",    "/etc/passwd", "../x", "a/../b", "a/..",  ".",
                         "./a", "a/",          "a//b", "a**",    "**b/c", "x/a\nb"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (!eph_glob_pattern_error(bad[i], strlen(bad[i])))
            fail_msg("'%s' was accepted", bad[i]);
    /* An embedded NUL: the length as received says more than strlen. */
    assert_non_null(eph_glob_pattern_error("a\0b", 3));
    char longp[EPH_GLOB_PATTERN_MAX + 2];
    memset(longp, 'a', sizeof(longp) - 1);
    longp[sizeof(longp) - 1] = '\0';
    assert_non_null(eph_glob_pattern_error(longp, strlen(longp)));
    longp[EPH_GLOB_PATTERN_MAX] = '\0';
    assert_null(eph_glob_pattern_error(longp, EPH_GLOB_PATTERN_MAX));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_match),
        cmocka_unit_test(test_pattern_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
