/* The one migration runner (store/migrations.c): it applies, in order, exactly the migrations that
 * are not recorded, whatever the gaps between versions; a failed one is rolled back and stops the
 * run; those before it stay applied. Against a recording fake, then each store's own list. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "store/migrations.h"

struct fake {
    int recorded[16];
    size_t nrecorded;
    int applied[16];
    size_t napplied;
    int fail_version;
    unsigned begins, commits, rollbacks;
};

static int f_recorded(void *db, int version)
{
    struct fake *f = db;
    for (size_t i = 0; i < f->nrecorded; i++)
        if (f->recorded[i] == version)
            return 1;
    return 0;
}

static int f_apply(void *db, const struct eph_migration *m)
{
    struct fake *f = db;
    if (m->version == f->fail_version)
        return -EIO;
    f->applied[f->napplied++] = m->version;
    f->recorded[f->nrecorded++] = m->version;
    return 0;
}

static int f_begin(void *db)
{
    ((struct fake *)db)->begins++;
    return 0;
}

static int f_commit(void *db)
{
    ((struct fake *)db)->commits++;
    return 0;
}

static void f_rollback(void *db)
{
    ((struct fake *)db)->rollbacks++;
}

static const struct eph_migration list[] = {
    {1, "one", "-- 1"}, {2, "two", "-- 2"}, {7, "seven", "-- 7"}, {11, "eleven", "-- 11"}};

static void test_applies_what_is_not_recorded(void **state)
{
    (void)state;
    struct fake f = {.recorded = {1, 11}, .nrecorded = 2};
    struct eph_migrator mg = {.db = &f,
                              .recorded = f_recorded,
                              .apply = f_apply,
                              .begin = f_begin,
                              .commit = f_commit,
                              .rollback = f_rollback};
    assert_int_equal(eph_migrations_run(&mg, list, 4), 0);
    /* 2 and 7, in order; 11 was applied before 7 existed (a gap), and is not applied again. */
    assert_int_equal(f.napplied, 2);
    assert_int_equal(f.applied[0], 2);
    assert_int_equal(f.applied[1], 7);
    assert_int_equal(f.begins, 2);
    assert_int_equal(f.commits, 2);
    assert_int_equal(f.rollbacks, 0);
    /* Run again: nothing to do. */
    assert_int_equal(eph_migrations_run(&mg, list, 4), 0);
    assert_int_equal(f.napplied, 2);
}

static void test_a_failure_stops_and_rolls_back(void **state)
{
    (void)state;
    struct fake f = {.fail_version = 7};
    struct eph_migrator mg = {.db = &f,
                              .recorded = f_recorded,
                              .apply = f_apply,
                              .begin = f_begin,
                              .commit = f_commit,
                              .rollback = f_rollback};
    assert_int_equal(eph_migrations_run(&mg, list, 4), -EIO);
    assert_int_equal(f.napplied, 2); /* 1 and 2 stay */
    assert_int_equal(f.rollbacks, 1);
    assert_int_equal(f.commits, 2);
    /* Without a transaction of its own (PostgreSQL: the caller's around the whole run). */
    struct fake g = {.fail_version = 2};
    struct eph_migrator one = {.db = &g, .recorded = f_recorded, .apply = f_apply};
    assert_int_equal(eph_migrations_run(&one, list, 4), -EIO);
    assert_int_equal(g.napplied, 1);
}

/* Each store's list: versions rise, and each is named and has SQL. */
static void check_list(const struct eph_migration *l, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        assert_true(l[i].version > (i ? l[i - 1].version : 0));
        assert_non_null(l[i].name);
        assert_true(l[i].sql && l[i].sql[0]);
    }
}

static void test_store_lists_rise(void **state)
{
    (void)state;
    check_list(eph_sqlite_migrations, eph_sqlite_migrations_count);
    check_list(eph_postgres_migrations, eph_postgres_migrations_count);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_applies_what_is_not_recorded),
        cmocka_unit_test(test_a_failure_stops_and_rolls_back),
        cmocka_unit_test(test_store_lists_rise),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
