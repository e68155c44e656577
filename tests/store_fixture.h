/* The store fixture of the unit tests: a temporary directory, a fresh store in it (SQLite, or the
 * PostgreSQL database of tests/store_target.h when EPH_TEST_PG is set) and the org "acme" with
 * 100000 credits, created by it. store_fixture_teardown closes the store and removes the directory
 * with everything in it. Both fail the test (cmocka) instead of returning an error. */
#ifndef EPH_TEST_STORE_FIXTURE_H
#define EPH_TEST_STORE_FIXTURE_H

#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "store/store.h"
#include "store_target.h"

struct store_fixture {
    char dir[64];   /* the temporary directory, removed by store_fixture_teardown */
    char path[128]; /* the SQLite file in it */
    struct eph_store *st;
    char org[48]; /* "acme"'s id */
};

/* name (a few letters) names the directory: /tmp/eph-NAME-XXXXXX. */
static inline void store_fixture_setup(struct store_fixture *sf, const char *name)
{
    assert_true(snprintf(sf->dir, sizeof(sf->dir), "/tmp/eph-%s-XXXXXX", name) <
                (int)sizeof(sf->dir));
    assert_non_null(mkdtemp(sf->dir));
    snprintf(sf->path, sizeof(sf->path), "%s/test.db", sf->dir);
    assert_int_equal(test_store_open(sf->path, &sf->st), 0);
    bool created;
    assert_int_equal(
        sf->st->ops->org_ensure(sf->st, "acme", 100000, sf->org, sizeof(sf->org), &created), 0);
    assert_true(created);
}

static inline int store_fixture_remove_(const char *path, const struct stat *sb, int type,
                                        struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    return type == FTW_DP ? rmdir(path) : unlink(path);
}

static inline void store_fixture_teardown(struct store_fixture *sf)
{
    sf->st->ops->close(sf->st);
    sf->st = NULL;
    /* Depth first, so each directory is empty when it is removed; links are not followed. */
    assert_int_equal(nftw(sf->dir, store_fixture_remove_, 8, FTW_DEPTH | FTW_PHYS), 0);
}

#endif
