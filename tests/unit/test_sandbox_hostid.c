/* Host id leases (src/sandbox/hostid.c): ids are unique among live holders, in this process and
 * across processes (another process stands for another server on the host); a released id, or
 * one whose holder died, is taken again; a full range says EAGAIN; bad ranges are refused. Each
 * test uses its own lock directory (EPHEMERAL_RUN_DIR), so nothing here touches the host's. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "sandbox/hostid.h"

#define BASE 0x7e000000u

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/ephemeral-hostid-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    return setenv("EPHEMERAL_RUN_DIR", dir, 1);
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_unique_in_process(void **state)
{
    (void)state;
    struct eph_hostid_lease a, b, c;
    assert_int_equal(eph_hostid_acquire(BASE, 4, &a), 0);
    assert_int_equal(eph_hostid_acquire(BASE, 4, &b), 0);
    assert_int_not_equal(a.id, b.id);
    assert_true(a.id >= BASE && a.id < BASE + 4);
    eph_hostid_release(&a);
    assert_int_equal(a.fd, -1);
    assert_int_equal(eph_hostid_acquire(BASE, 4, &c), 0);
    assert_int_equal(c.id, BASE); /* the lowest free one: a's, released */
    eph_hostid_release(&b);
    eph_hostid_release(&c);
}

static void test_full_range(void **state)
{
    (void)state;
    struct eph_hostid_lease l[3];
    assert_int_equal(eph_hostid_acquire(BASE, 2, &l[0]), 0);
    assert_int_equal(eph_hostid_acquire(BASE, 2, &l[1]), 0);
    assert_int_equal(eph_hostid_acquire(BASE, 2, &l[2]), -EAGAIN);
    assert_int_equal(l[2].fd, -1);
    eph_hostid_release(&l[0]);
    eph_hostid_release(&l[1]);
    eph_hostid_release(&l[2]); /* a failed lease releases as a no-op */
}

/* Another process holds ids: this one never gets them while it lives, and gets them once it has
 * died without releasing anything. */
static void test_unique_across_processes(void **state)
{
    (void)state;
    int ready[2], done[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(done), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(ready[0]);
        close(done[1]);
        struct eph_hostid_lease x, y;
        if (eph_hostid_acquire(BASE, 8, &x) || eph_hostid_acquire(BASE, 8, &y))
            _exit(1);
        uint32_t ids[2] = {x.id, y.id};
        if (write(ready[1], ids, sizeof(ids)) != (ssize_t)sizeof(ids))
            _exit(1);
        char c;
        ssize_t r = read(done[0], &c, 1); /* until the parent closes its end */
        _exit(r == 0 ? 0 : 1);            /* dies holding both */
    }
    close(ready[1]);
    close(done[0]);
    uint32_t theirs[2];
    assert_int_equal(read(ready[0], theirs, sizeof(theirs)), (ssize_t)sizeof(theirs));
    struct eph_hostid_lease mine[6];
    for (int i = 0; i < 6; i++) {
        assert_int_equal(eph_hostid_acquire(BASE, 8, &mine[i]), 0);
        assert_int_not_equal(mine[i].id, theirs[0]);
        assert_int_not_equal(mine[i].id, theirs[1]);
    }
    struct eph_hostid_lease none;
    assert_int_equal(eph_hostid_acquire(BASE, 8, &none), -EAGAIN);
    close(done[1]);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    struct eph_hostid_lease after[2];
    assert_int_equal(eph_hostid_acquire(BASE, 8, &after[0]), 0);
    assert_int_equal(eph_hostid_acquire(BASE, 8, &after[1]), 0);
    assert_true((after[0].id == theirs[0] && after[1].id == theirs[1]) ||
                (after[0].id == theirs[1] && after[1].id == theirs[0]));
    for (int i = 0; i < 6; i++)
        eph_hostid_release(&mine[i]);
    eph_hostid_release(&after[0]);
    eph_hostid_release(&after[1]);
    close(ready[0]);
}

static void test_bad_ranges(void **state)
{
    (void)state;
    struct eph_hostid_lease l;
    assert_int_equal(eph_hostid_acquire(0, 4, &l), -EINVAL);        /* host users' ids */
    assert_int_equal(eph_hostid_acquire(BASE, 70000, &l), -EINVAL); /* too many */
    assert_int_equal(eph_hostid_acquire(0xfffffff0u, 64, &l), -EINVAL);
    assert_int_equal(l.fd, -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_unique_in_process, setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_range, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unique_across_processes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_ranges, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
