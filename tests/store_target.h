/* The store a store test runs against: SQLite at the fixture's path, or, when EPH_TEST_PG names a
 * PostgreSQL server (a URI ending in '/', set by tests/blackbox/store_postgres.sh), a fresh
 * database created on it for this test. The same tests thus prove both stores. */
#ifndef EPH_TEST_STORE_TARGET_H
#define EPH_TEST_STORE_TARGET_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "common/id.h"
#include "store/store.h"

/* The PostgreSQL target of the last test_store_open ("" on SQLite), to open a second store on the
 * same database. */
static char test_store_pg_target[512];

static inline int test_store_open(const char *sqlite_path, struct eph_store **st)
{
    test_store_pg_target[0] = '\0';
    char err[256];
    const char *pg = getenv("EPH_TEST_PG");
    if (!pg || !*pg) {
        int rc = eph_store_open(sqlite_path, st, err, sizeof(err));
        if (rc)
            fprintf(stderr, "store: %s\n", err);
        return rc;
    }
    char name[40], admin[512], target[512];
    if (eph_id_hex("eph_t_", 8, name, sizeof(name)))
        return -1;
    snprintf(admin, sizeof(admin), "%spostgres", pg);
    PGconn *c = PQconnectdb(admin);
    if (PQstatus(c) != CONNECTION_OK) {
        fprintf(stderr, "store: %s\n", PQerrorMessage(c));
        PQfinish(c);
        return -1;
    }
    char sql[96];
    snprintf(sql, sizeof(sql), "CREATE DATABASE %s", name);
    PGresult *r = PQexec(c, sql);
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    if (!ok)
        fprintf(stderr, "store: %s\n", PQresultErrorMessage(r));
    PQclear(r);
    PQfinish(c);
    if (!ok)
        return -1;
    snprintf(target, sizeof(target), "%s%s", pg, name);
    snprintf(test_store_pg_target, sizeof(test_store_pg_target), "%s", target);
    int rc = eph_store_open(target, st, err, sizeof(err));
    if (rc)
        fprintf(stderr, "store: %s\n", err);
    return rc;
}

#endif
