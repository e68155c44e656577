/* Finding a backend's host program (sandbox/program.c): the operator's absolute path first, then
 * the first regular executable of that name in an absolute directory of $PATH; a relative
 * directory, a file that is not executable and a directory of that name are passed over. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "sandbox/program.h"

static char dir[] = "/tmp/eph-program-XXXXXX";

static void make_file(const char *path, mode_t mode)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("#!/bin/sh\n", f);
    fclose(f);
    assert_int_equal(chmod(path, mode), 0);
}

static int setup(void **state)
{
    (void)state;
    if (!mkdtemp(dir))
        return -1;
    char p[256];
    const char *subs[] = {"a", "b", "c", "d"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(p, sizeof(p), "%s/%s", dir, subs[i]);
        if (mkdir(p, 0755))
            return -1;
    }
    snprintf(p, sizeof(p), "%s/a/tool", dir);
    make_file(p, 0644); /* not executable */
    snprintf(p, sizeof(p), "%s/b/tool", dir);
    if (mkdir(p, 0755)) /* a directory of that name */
        return -1;
    snprintf(p, sizeof(p), "%s/c/tool", dir);
    make_file(p, 0755); /* the one */
    snprintf(p, sizeof(p), "%s/d/tool", dir);
    make_file(p, 0755); /* later on PATH */
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_first_executable_on_path(void **state)
{
    (void)state;
    char path[1024], out[512], want[300];
    snprintf(path, sizeof(path), "relative/dir:%s/a:%s/b:%s/c:%s/d", dir, dir, dir, dir);
    setenv("PATH", path, 1);
    unsetenv("EPH_TEST_TOOL");
    eph_sandbox_find_program("EPH_TEST_TOOL", "tool", out, sizeof(out));
    snprintf(want, sizeof(want), "%s/c/tool", dir);
    assert_string_equal(out, want);
}

static void test_operator_path_first(void **state)
{
    (void)state;
    char out[512], want[300];
    snprintf(want, sizeof(want), "%s/d/tool", dir);
    setenv("EPH_TEST_TOOL", want, 1);
    eph_sandbox_find_program("EPH_TEST_TOOL", "tool", out, sizeof(out));
    assert_string_equal(out, want);
    /* Not executable: none, rather than another one the operator did not choose. */
    snprintf(want, sizeof(want), "%s/a/tool", dir);
    setenv("EPH_TEST_TOOL", want, 1);
    eph_sandbox_find_program("EPH_TEST_TOOL", "tool", out, sizeof(out));
    assert_string_equal(out, "");
    unsetenv("EPH_TEST_TOOL");
}

static void test_none(void **state)
{
    (void)state;
    char out[512], path[300];
    snprintf(path, sizeof(path), "%s/a:%s/b", dir, dir);
    setenv("PATH", path, 1);
    eph_sandbox_find_program("EPH_TEST_TOOL", "tool", out, sizeof(out));
    assert_string_equal(out, "");
    /* A buffer too small for the path found is "" too, never a cut path. */
    snprintf(path, sizeof(path), "%s/c", dir);
    setenv("PATH", path, 1);
    char small[8];
    eph_sandbox_find_program("EPH_TEST_TOOL", "tool", small, sizeof(small));
    assert_string_equal(small, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_executable_on_path),
        cmocka_unit_test(test_operator_path_first),
        cmocka_unit_test(test_none),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
