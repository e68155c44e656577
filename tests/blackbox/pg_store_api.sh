#!/bin/bash
# The store's unit tests (tests/unit/test_store_api.c: keys, connections, events, a run's outputs
# as bytea, idempotency) against a PostgreSQL 15 of their own, through the fixture's EPH_TEST_PG.
# Skips where the PostgreSQL server binaries are missing.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/pg_common.sh"
pg_bindir >/dev/null || skip "PostgreSQL server binaries not installed (scripts/setup-deps.sh test)"
[ -x "$BUILD/tests/test_store_api" ] || skip "no $BUILD/tests/test_store_api (make test builds it)"
pg_start
EPH_TEST_PG=$PG_URL "$BUILD/tests/test_store_api" >"$TEST_TMP/store_api.log" 2>&1 ||
    { tail -n 40 "$TEST_TMP/store_api.log" >&2; fail "test_store_api on PostgreSQL"; }
grep -q 'applied migration 6 (run outputs' "$TEST_TMP/store_api.log" || fail "not on PostgreSQL"
grep -q 'OK \] test_run_outputs' "$TEST_TMP/store_api.log" || fail "test_run_outputs did not run"
