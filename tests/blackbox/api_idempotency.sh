#!/bin/bash
# Idempotency (docs/API.md): the same key and request replays the stored answer with 200 and
# Idempotent-Replayed: true and creates nothing; another body or another path with the key is
# 422; a key whose first request is still in flight is 409; keys are scoped to the org; keys
# expire after the TTL; ten concurrent requests with one key create exactly one run and one
# reservation.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/api_common.sh"
test_deadline 120
have_image || skip "no sandbox image (make image)"
# A TTL far longer than the test, so that no check depends on the machine's speed; the expiry is
# checked at the end by a server with a TTL of 1 s on the same store.
start_api_server '"idempotency_ttl_seconds": 3600'

body=$(jq -cn --arg p "$SLOW_PROMPT" '{prompt: $p, max_cost_micros: 20000, metadata: {a: "1", b: "2"}}')
post() { # KEY BODY [curl args]
    local key=$1 b=$2
    shift 2
    api POST /v1/runs -H 'Content-Type: application/json' -H "Idempotency-Key: $key" \
        --data-binary "$b" -D "$TEST_TMP/headers" "$@"
}
count_runs() { api GET '/v1/runs?limit=100' | sed '$d' | jq '.data | length'; }
reserved() { api GET /v1/balance | sed '$d' | jq .reserved_micros; }

out=$(post k1 "$body")
assert_eq "$(code_of "$out")" 201 "first"
id=$(body_of "$out" | jq -r .id)
grep -qi '^Idempotent-Replayed' "$TEST_TMP/headers" && fail "the first answer says replayed"

# The same request again (the same body with its keys in another order and other spacing):
# the stored answer, 200, the header, no new run, no new reservation.
reordered=$(jq -c '{metadata: {b: "2", a: "1"}, max_cost_micros, prompt}' <<<"$body")
for b in "$body" "$reordered"; do
    out=$(post k1 "$b")
    assert_eq "$(code_of "$out")" 200 "replay"
    assert_eq "$(body_of "$out" | jq -r .id)" "$id" "replayed run"
    grep -qi '^Idempotent-Replayed: true' "$TEST_TMP/headers" || fail "no Idempotent-Replayed header"
done
assert_eq "$(count_runs)" 1 "runs after replays"
assert_eq "$(reserved)" 20000 "one reservation"

# Another body, or another path, with the same key: 422, nothing done.
other=$(jq -c '.max_cost_micros = 20001' <<<"$body")
assert_error "$(post k1 "$other")" 422 idempotency_error Idempotency-Key
out=$(api POST /v1/credits -H 'Content-Type: application/json' -H 'Idempotency-Key: k1' \
    -d '{"micros": 1000}')
assert_error "$out" 422 idempotency_error Idempotency-Key
assert_eq "$(api GET /v1/balance | sed '$d' | jq .balance_micros)" 100000000 "no credit added"
out=$(api POST "/v1/runs/$id/cancel" -H 'Idempotency-Key: k1')
assert_error "$out" 422 idempotency_error Idempotency-Key
assert_eq "$(run_field "$id" .status)" "$(run_field "$id" .status)" "status"
[ "$(run_field "$id" .status)" != cancelled ] || fail "a refused cancel cancelled the run"
assert_eq "$(count_runs)" 1 "runs after 422s"

# Bad keys.
out=$(api POST /v1/runs -H 'Content-Type: application/json' -H 'Idempotency-Key;' --data-binary "$body")
assert_error "$out" 400 invalid_request_error Idempotency-Key
assert_error "$(post "$(printf 'k\001')" "$body")" 400 invalid_request_error Idempotency-Key
assert_error "$(post "$(head -c 256 /dev/zero | tr '\0' k)" "$body")" 400 invalid_request_error Idempotency-Key
assert_eq "$(count_runs)" 1 "runs after bad keys"

# In flight: a request with the key has begun and not answered. The state of a first request
# caught between its start and its answer is the stored record with no status yet: make one from
# the first request's own record (same hash) under a new key.
sqlite3 -cmd '.timeout 5000' "$DB" "INSERT INTO idempotency (org_id, key, request_hash, created_at)
    SELECT org_id, 'k-inflight', request_hash, CAST(strftime('%s','now') AS INTEGER) * 1000
    FROM idempotency WHERE key = 'k1'" || fail "sqlite insert"
assert_error "$(post k-inflight "$body")" 409 idempotency_error Idempotency-Key
assert_eq "$(count_runs)" 1 "runs after 409"

# Keys are per org: the same key in another org is a new request there.
other_key=$(new_org other)
out=$(as "$other_key" post k1 "$body")
assert_eq "$(code_of "$out")" 201 "same key, other org"
other_id=$(body_of "$out" | jq -r .id)
[ "$other_id" != "$id" ] || fail "another org got our run"
as "$other_key" api POST "/v1/runs/$other_id/cancel" >/dev/null

# Idempotent credit: the same request twice adds once.
before=$(api GET /v1/balance | sed '$d' | jq .balance_micros)
for _ in 1 2; do
    out=$(api POST /v1/credits -H 'Content-Type: application/json' -H 'Idempotency-Key: credit-1' \
        -d '{"micros": 1234}')
    case $(code_of "$out") in 200) ;; *) fail "credit: $out" ;; esac
done
assert_eq "$(api GET /v1/balance | sed '$d' | jq .balance_micros)" $((before + 1234)) "credit added once"

# Ten concurrent requests with one new key: exactly one run, one reservation; the others are
# replays (200) or in flight (409).
conc=$(jq -cn --arg p "$SLOW_PROMPT" '{prompt: $p, max_cost_micros: 30000}')
for i in $(seq 10); do
    post k-conc "$conc" -D /dev/null >"$TEST_TMP/conc.$i" 2>&1 &
    _pids+=("$!")
done
wait_until "the ten requests" 400 bash -c "for i in \$(seq 10); do tail -n 1 '$TEST_TMP/conc.'\$i | grep -q '^HTTP ' || exit 1; done"
codes=$(for i in $(seq 10); do tail -n 1 "$TEST_TMP/conc.$i" | sed 's/^HTTP //'; done | sort | uniq -c | tr -s ' ')
n201=$(for i in $(seq 10); do tail -n 1 "$TEST_TMP/conc.$i"; done | grep -c 'HTTP 201')
echo "concurrent answers: $codes"
assert_eq "$n201" 1 "one 201 among: $codes"
bad=$(for i in $(seq 10); do tail -n 1 "$TEST_TMP/conc.$i"; done | grep -vcE 'HTTP (201|200|409)')
assert_eq "$bad" 0 "only 201, 200 and 409 among: $codes"
ids=$(for i in $(seq 10); do sed '$d' "$TEST_TMP/conc.$i" | jq -r '.id // empty'; done | sort -u)
assert_eq "$(wc -l <<<"$ids")" 1 "every replay names the one run"
assert_eq "$(count_runs)" 2 "runs after the concurrent requests"
# The org's reservations in the ledger, not what is held now: the first run (60 s of sleep) may
# have finished by now on a slow machine, and released its share.
org_reserves=$(sqlite3 -cmd '.timeout 5000' "$DB" "SELECT COUNT(*) || ' ' || SUM(micros) FROM ledger
    WHERE kind = 'reserve' AND org_id = (SELECT org_id FROM runs WHERE id = '$id')")
assert_eq "$org_reserves" "2 50000" "reservations: the first run's and one more"
reserves=$(sqlite3 -cmd '.timeout 5000' "$DB" "SELECT COUNT(*) FROM ledger WHERE kind = 'reserve' AND run_id = '$ids'")
assert_eq "$reserves" 1 "ledger: one reservation for the run"

# Expiry: after the TTL the key is forgotten and the same request makes a new run. Remembered
# while the TTL is long; then a server with a TTL of 1 s on the same store forgets it (polled,
# bounded).
out=$(post k-exp "$body")
assert_eq "$(code_of "$out")" 201 "a key to expire"
first_exp=$(body_of "$out" | jq -r .id)
out=$(post k-exp "$body")
assert_eq "$(code_of "$out")" 200 "still remembered"
kill -TERM "$SERVER_PID"
wait "$SERVER_PID"
start_api_server '"idempotency_ttl_seconds": 1'
new=""
for _ in $(seq 200); do
    out=$(post k-exp "$body")
    if [ "$(code_of "$out")" = 201 ]; then new=$(body_of "$out" | jq -r .id); break; fi
    assert_eq "$(code_of "$out")" 200 "before expiry"
    sleep 0.05
done
[ -n "$new" ] || fail "the key never expired"
[ "$new" != "$first_exp" ] || fail "expired key replayed the old run"
for r in "$id" "$ids" "$first_exp" "$new"; do api POST "/v1/runs/$r/cancel" >/dev/null; done
echo "idempotency: ok"
