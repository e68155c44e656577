#!/bin/bash
# Money at the API (docs/API.md, docs/MONEY.md): GET /v1/balance; 402 insufficient_balance_error when
# max_cost_micros exceeds the available balance; concurrent creations never reserve more than the
# balance (credit for exactly 3 runs, 10 parallel creations: exactly 3 x 201 and 7 x 402); POST
# /v1/credits adds to it; and 429 rate_limit_error once the org has max_queued_runs_per_org
# queued runs.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/api_common.sh"
test_deadline 120
have_image || skip "no sandbox image (make image)"
# First a server that can work on four runs at once (the race below must not meet the queue
# limit), then one with a tiny queue limit for 429.
start_api_server '"max_concurrent_runs": 4'

# An org with credit for exactly three runs of 10000.
tight=$(new_org tight 30000) || fail "org"
out=$(as "$tight" api GET /v1/balance)
assert_eq "$(code_of "$out")" 200 "balance"
assert_eq "$(body_of "$out" | jq -c '[.object, .balance_micros, .reserved_micros, .available_micros]')" \
    '["balance",30000,0,30000]' "fresh balance"
out=$(as "$tight" create_run "$SLOW_PROMPT" 30001)
assert_error "$out" 402 insufficient_balance_error max_cost_micros
assert_eq "$(as "$tight" api GET /v1/runs | sed '$d' | jq '.data | length')" 0 "no run on 402"

for i in $(seq 10); do
    as "$tight" create_run "$SLOW_PROMPT" 10000 >"$TEST_TMP/race.$i" 2>&1 &
    _pids+=("$!")
done
wait_until "the ten creations" 400 bash -c "for i in \$(seq 10); do tail -n 1 '$TEST_TMP/race.'\$i | grep -q '^HTTP ' || exit 1; done"
n201=$(cat "$TEST_TMP"/race.* | grep -c '^HTTP 201')
n402=$(cat "$TEST_TMP"/race.* | grep -c '^HTTP 402')
assert_eq "$n201:$n402" "3:7" "201s and 402s"
for i in $(seq 10); do
    if tail -n 1 "$TEST_TMP/race.$i" | grep -q 'HTTP 402'; then
        assert_error "$(cat "$TEST_TMP/race.$i")" 402 insufficient_balance_error max_cost_micros
    fi
done
out=$(as "$tight" api GET /v1/balance | sed '$d')
assert_eq "$(jq -c '[.reserved_micros, .available_micros]' <<<"$out")" '[30000,0]' "all reserved, none over"
mapfile -t won < <(as "$tight" api GET /v1/runs | sed '$d' | jq -r '.data[].id')
assert_eq "${#won[@]}" 3 "three runs"

# Credit: an admin adds to the balance; the answer is the new balance.
out=$(as "$tight" api POST /v1/credits -H 'Content-Type: application/json' -d '{"micros": 10000}')
assert_eq "$(code_of "$out")" 200 "credit"
assert_eq "$(body_of "$out" | jq -c '[.balance_micros, .available_micros]')" '[40000,10000]' "after credit"
out=$(as "$tight" create_run "$SLOW_PROMPT" 10000)
assert_eq "$(code_of "$out")" 201 "a fourth run fits after the credit"
won+=("$(body_of "$out" | jq -r .id)")
for id in "${won[@]}"; do as "$tight" api POST "/v1/runs/$id/cancel" >/dev/null; done
out=$(as "$tight" api GET /v1/balance | sed '$d')
assert_eq "$(jq .reserved_micros <<<"$out")" 0 "released after cancel"
[ "$(jq .available_micros <<<"$out")" -le 40000 ] || fail "available above the credits"
[ "$(jq .available_micros <<<"$out")" -eq "$(jq .balance_micros <<<"$out")" ] || fail "balance != available"

# 429: a server with max_concurrent_runs 1 and max_queued_runs_per_org 2. One run executes, two
# wait, the next is refused until one of the waiting ones leaves the queue.
kill -TERM "$SERVER_PID"
wait "$SERVER_PID"
start_api_server '"max_concurrent_runs": 1, "max_queued_runs_per_org": 2'
first=$(new_run "$SLOW_PROMPT" 20000)
wait_command_running "$first"
q1=$(new_run "$SLOW_PROMPT" 20000)
q2=$(new_run "$SLOW_PROMPT" 20000)
assert_eq "$(run_field "$q1" .status)$(run_field "$q2" .status)" queuedqueued "two queued"
out=$(create_run "$SLOW_PROMPT" 20000 -D "$TEST_TMP/429.headers")
assert_error "$out" 429 rate_limit_error
grep -qi '^Retry-After: [0-9]' "$TEST_TMP/429.headers" || fail "429 without Retry-After"
assert_eq "$(api GET '/v1/runs?status=queued' | sed '$d' | jq '.data | length')" 2 "no third queued run"
# Another org is not limited by this one's queue.
out=$(as "$tight" create_run "$QUICK_PROMPT" 1000)
assert_eq "$(code_of "$out")" 201 "another org's queue"
as "$tight" api POST "/v1/runs/$(body_of "$out" | jq -r .id)/cancel" >/dev/null
api POST "/v1/runs/$q1/cancel" >/dev/null
out=$(create_run "$SLOW_PROMPT" 20000)
assert_eq "$(code_of "$out")" 201 "room again after a cancel"
echo "balance: ok"
