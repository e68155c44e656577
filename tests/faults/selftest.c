/* The harness's self-test (tests/blackbox/faults_selftest.sh): one test over tests/faults/sample.c,
 * whose two allocations the harness fails in turn. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

int sample_pair(const char *a, const char *b, char **oa, char **ob);

static void test_pair(void **state)
{
    (void)state;
    char *a = NULL, *b = NULL;
    assert_int_equal(sample_pair("left", "right", &a, &b), 0);
    assert_string_equal(a, "left");
    assert_string_equal(b, "right");
    free(a);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_pair)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
