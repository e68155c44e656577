#!/bin/bash
# The store's webhook tests (tests/unit/test_store_webhooks.c: endpoints, deliveries queued by a
# settlement, claims with FOR UPDATE SKIP LOCKED, attempts, a reopen) against a PostgreSQL of
# their own, through the fixture's EPH_TEST_PG. Skips where the PostgreSQL server binaries are
# missing.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/pg_common.sh"
pg_bindir >/dev/null || skip "PostgreSQL server binaries not installed (scripts/setup-deps.sh test)"
[ -x "$BUILD/tests/test_store_webhooks" ] || skip "no $BUILD/tests/test_store_webhooks (make test builds it)"
pg_start
EPH_TEST_PG=$PG_URL "$BUILD/tests/test_store_webhooks" >"$TEST_TMP/store_webhooks.log" 2>&1 ||
    { tail -n 40 "$TEST_TMP/store_webhooks.log" >&2; fail "test_store_webhooks on PostgreSQL"; }
grep -q 'applied migration 8 (webhooks' "$TEST_TMP/store_webhooks.log" || fail "not on PostgreSQL"
grep -q 'OK \] test_claim_record_retry' "$TEST_TMP/store_webhooks.log" || fail "test_claim_record_retry did not run"
