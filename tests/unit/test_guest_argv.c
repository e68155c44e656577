/* Which commands the init runs without a shell (src/guest/argv.h), and their words: plain words
 * split on blanks; every command the shell would read otherwise - a quote, an expansion, a glob,
 * a redirection, an operator, a comment, a keyword or built-in first, an assignment first, a
 * non-ASCII byte, too many words, too long - is left to the shell (0). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "guest/argv.h"

static char buf[4096];
static char *argv[EPH_GUEST_ARGV_MAX + 1];

static int split(const char *command)
{
    memset(argv, 0, sizeof(argv));
    return eph_guest_argv_split(command, buf, sizeof(buf), argv);
}

static void test_plain_words(void **state)
{
    (void)state;
    assert_int_equal(split("ls -la /tmp"), 3);
    assert_string_equal(argv[0], "ls");
    assert_string_equal(argv[1], "-la");
    assert_string_equal(argv[2], "/tmp");
    assert_null(argv[3]);
    assert_int_equal(split("  python3 \t script.py\targ-1,2 "), 3);
    assert_string_equal(argv[0], "python3");
    assert_string_equal(argv[1], "script.py");
    assert_string_equal(argv[2], "arg-1,2");
    assert_int_equal(split("/bin/true"), 1);
    assert_string_equal(argv[0], "/bin/true");
    assert_int_equal(split("./a.out x=1 --opt=a:b@c%d+e"), 3);
    assert_string_equal(argv[1], "x=1");
    assert_int_equal(split("sh -c env"), 3); /* words, whatever they mean to the program */
}

static void test_shell_needed(void **state)
{
    (void)state;
    static const char *const shell[] = {
        "",         "   ",      "\t",          "echo hi", "cd /",    "x=1 ls",     "ls | wc",
        "ls > f",   "ls < f",   "ls;ls",       "ls && x", "ls || x", "ls &",       "ls $HOME",
        "ls `id`",  "ls *",     "ls ?",        "ls [a]",  "ls ~",    "ls 'a b'",   "ls \"a\"",
        "ls \\x",   "ls\nls",   "# c",         "ls #c",   "if",      "[ -e x ]",   "test -e x",
        "ls (",     "ls {a,b}", "ls \xc3\xa9", "a=b",     "exec ls", "export X=1", "kill 1",
        "printf x", "true",     "pwd",         ". ./x",   ": x",     "while",      "ls !",
        "ls ^x",
    };
    for (size_t i = 0; i < sizeof(shell) / sizeof(shell[0]); i++) {
        if (split(shell[i]) != 0)
            fail_msg("'%s' split without the shell", shell[i]);
    }
}

static void test_limits(void **state)
{
    (void)state;
    char many[EPH_GUEST_ARGV_MAX * 2 + 8];
    size_t w = 0;
    for (int i = 0; i < EPH_GUEST_ARGV_MAX; i++) {
        many[w++] = 'a';
        many[w++] = ' ';
    }
    many[w] = '\0';
    assert_int_equal(split(many), EPH_GUEST_ARGV_MAX); /* the most words */
    many[w++] = 'b';
    many[w] = '\0';
    assert_int_equal(split(many), 0); /* one more */
    char small[4];
    char *av[EPH_GUEST_ARGV_MAX + 1];
    assert_int_equal(eph_guest_argv_split("abc", small, sizeof(small), av), 1);
    assert_int_equal(eph_guest_argv_split("abcd", small, sizeof(small), av), 0); /* too long */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_words),
        cmocka_unit_test(test_shell_needed),
        cmocka_unit_test(test_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
