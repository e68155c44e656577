/* The orphan sweeps' rule (sandbox/guest.c, eph_guest_name_orphaned): a host name the layer made,
 * "<tag>-<server pid>-<prefix><n>", is an orphan when its server is gone; a live server's (this
 * one's too), another backend's prefix, or a name of any other shape is never one, so a sweep
 * leaves it alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "sandbox/backend.h"

/* A pid no process has now: a child's, once reaped. */
static pid_t dead_pid(void)
{
    pid_t p = fork();
    if (p == 0)
        _exit(0);
    assert_true(p > 0);
    assert_int_equal(waitpid(p, NULL, 0), p);
    return p;
}

static void test_orphans(void **state)
{
    (void)state;
    char n[64];
    pid_t dead = dead_pid();
    snprintf(n, sizeof(n), "eph-%d-gv7", (int)dead);
    assert_true(eph_guest_name_orphaned(n, "gv"));
    snprintf(n, sizeof(n), "run_1-%d-12", (int)dead);
    assert_true(eph_guest_name_orphaned(n, ""));
    /* Another backend's prefix, or none where one is wanted. */
    snprintf(n, sizeof(n), "eph-%d-vm7", (int)dead);
    assert_false(eph_guest_name_orphaned(n, "gv"));
    snprintf(n, sizeof(n), "eph-%d-7", (int)dead);
    assert_false(eph_guest_name_orphaned(n, "vm"));
    /* Other shapes. */
    const char *bad[] = {
        "",       "eph",     "eph-",       "-1-2",         "Eph-99999-1",    "eph-x-1",
        "eph--1", "eph-0-1", "eph-99999-", "eph-99999-gv", "eph-99999-gv1x", "eph-99999-1/"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_false(eph_guest_name_orphaned(bad[i], "gv"));
        assert_false(eph_guest_name_orphaned(bad[i], ""));
    }
    snprintf(n, sizeof(n), "eph-%d-gv1x", (int)dead);
    assert_false(eph_guest_name_orphaned(n, "gv"));
}

static void test_live_servers_are_not_orphans(void **state)
{
    (void)state;
    char n[64];
    snprintf(n, sizeof(n), "eph-%d-vm3", (int)getpid());
    assert_false(eph_guest_name_orphaned(n, "vm"));           /* this server */
    assert_false(eph_guest_name_orphaned("eph-1-vm3", "vm")); /* init: running */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_orphans),
        cmocka_unit_test(test_live_servers_are_not_orphans),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
