#!/bin/bash
# Every store test (and the admission and worker-step tests, which use a store), unchanged,
# against a real PostgreSQL 15 started for this test: each test creates a fresh database
# (tests/store_target.h), applying the versioned migrations. Then two stores opened at once on one
# empty database migrate it exactly once (the advisory lock).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/pg_common.sh"
pg_start
for t in test_store_api test_store_fair test_store_images test_ledger test_store_money test_api_validate test_worker_files; do
    [ -x "$BUILD/tests/$t" ] || fail "$t is not built"
    EPH_TEST_PG=$PG_URL "$BUILD/tests/$t" || fail "$t against PostgreSQL"
done

# Two nodes starting together on an empty database: one migration, both open.
pg_createdb eph_race
for i in 1 2 3; do
    "$EPHD" admin init --db "${PG_URL}eph_race" >"$TEST_TMP/init$i.out" 2>"$TEST_TMP/init$i.err" &
    pids[$i]=$!
done
for i in 1 2 3; do wait "${pids[$i]}" || { cat "$TEST_TMP/init$i.err" >&2; fail "admin init $i"; }; done
# Every migration once: what one node alone records on an empty database (the versions need not
# be contiguous).
pg_createdb eph_alone
"$EPHD" admin init --db "${PG_URL}eph_alone" >/dev/null 2>"$TEST_TMP/alone.err" ||
    { cat "$TEST_TMP/alone.err" >&2; fail "admin init alone"; }
assert_eq "$(pg_sql eph_race 'SELECT string_agg(version::text, $$,$$ ORDER BY version) FROM schema_migrations')" \
    "$(pg_sql eph_alone 'SELECT string_agg(version::text, $$,$$ ORDER BY version) FROM schema_migrations')" \
    "migrations recorded once each"
assert_eq "$(pg_sql eph_race 'SELECT COUNT(*) FROM orgs')" 1 "one default org"
echo "store tests passed against PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}')"
