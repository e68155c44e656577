#!/bin/bash
# Readiness on PostgreSQL (docs/CONFIG.md, "Readiness"): a database server that turns read-only
# while the server runs (default_transaction_read_only, as a standby is) makes /healthz 503 with
# the store saying why, and 200 again once it takes writes.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/pg_common.sh"
pg_start
export EPH_TEST_PG=$PG_URL PG_BIN
start_server
health() { curl -sS -w '\nHTTP %{http_code}\n' "$EPHEMERAL_URL/healthz"; }
assert_eq "$(health | tail -n 1)" "HTTP 200" "health with a writable database"
"$PG_BIN/psql" -X -q "${PG_URL}postgres" -c "ALTER SYSTEM SET default_transaction_read_only = on" \
    -c "SELECT pg_reload_conf()" >/dev/null || fail "cannot make the server read-only"
unready() { [ "$(health | tail -n 1)" = "HTTP 503" ]; }
for _ in $(seq 200); do unready && break; sleep 0.05; done
out=$(health)
assert_eq "$(tail -n 1 <<<"$out")" "HTTP 503" "health with a read-only database: $out"
assert_eq "$(head -n 1 <<<"$out" | jq -r .store.ok)" false "the store's part"
assert_contains "$(head -n 1 <<<"$out" | jq -r .store.message)" \
    "the store cannot write: Read-only file system; the database server is read-only" "why"
"$PG_BIN/psql" -X -q "${PG_URL}postgres" -c "SET default_transaction_read_only = off" \
    -c "ALTER SYSTEM RESET default_transaction_read_only" -c "SELECT pg_reload_conf()" \
    >/dev/null || fail "cannot make the server writable again"
ready() { [ "$(health | tail -n 1)" = "HTTP 200" ]; }
for _ in $(seq 200); do ready && break; sleep 0.05; done
ready || fail "health once the database takes writes again: $(health)"
echo "a read-only PostgreSQL is reported, and readiness comes back with it"
