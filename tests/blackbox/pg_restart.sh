#!/bin/bash
# The database restarted under load (docs/STORE.md): two nodes work on runs that emit events every
# moment; PostgreSQL is stopped and started again under them. Every run completes (none lost),
# and every run's timeline is whole: the same events as an undisturbed run, numbered 1..n with no
# gap and none doubled; the ledger balances.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/api_common.sh"
. "$(dirname "$0")/pg_common.sh"
. "$(dirname "$0")/multinode_common.sh"
have_image || skip "no sandbox image (make image)"
test_deadline 240
multinode_setup
start_node a
start_node b
export EPHEMERAL_URL=$(node_url a) # api() without a node: node a
# An undisturbed run: the timeline every run must have.
ref=$(EPHEMERAL_URL=$(node_url a) new_run "$TICKER_PROMPT" 30000)
EPHEMERAL_URL=$(node_url a) wait_until "the reference run" 400 run_status_is "$ref" completed
ref_types=$(api GET "/v1/runs/$ref/events" | sed '$d' | jq -r '[.data[].type] | join(",")')

ids=()
for i in 1 2 3 4 5 6; do
    n=a
    [ $((i % 2)) -eq 0 ] && n=b
    ids+=("$(EPHEMERAL_URL=$(node_url $n) new_run "$TICKER_PROMPT" 30000)")
done
# Restart once every run has begun emitting (each is between its commands).
for id in "${ids[@]}"; do EPHEMERAL_URL=$(node_url a) wait_until "run $id to start" 400 run_has_event "$id" model.call; done
pg_stop
pg_restart_same
for id in "${ids[@]}"; do
    EPHEMERAL_URL=$(node_url a) wait_until "run $id to finish" 1200 bash -c \
        "curl -sS -H 'Authorization: Bearer $EPHEMERAL_API_KEY' $(node_url a)/v1/runs/$id | jq -e '.status != \"queued\" and .status != \"starting\" and .status != \"running\"' >/dev/null"
done
for id in "${ids[@]}"; do
    run=$(napi b GET "/v1/runs/$id" | sed '$d')
    assert_eq "$(jq -r .status <<<"$run")" completed "status of $id after the restart"
    ev=$(napi b GET "/v1/runs/$id/events" | sed '$d')
    n=$(jq '.data | length' <<<"$ev")
    assert_eq "$(jq -r '[.data[].seq] | map(tostring) | join(",")' <<<"$ev")" "$(seq -s, 1 "$n")" "event numbers of $id"
    # Outputs vary in timing only: the sequence of types is the reference's.
    assert_eq "$(jq -r '[.data[].type] | join(",")' <<<"$ev")" "$ref_types" "events of $id"
done
assert_ledger_consistent
assert_eq "$(napi a GET /v1/balance | sed '$d' | jq .reserved_micros)" 0 "reserved at the end"
grep -q 'connection lost' "$TEST_TMP/node-a.log" "$TEST_TMP/node-b.log" || fail "no node saw the database go"
echo "6 runs on 2 nodes through a database restart: all completed, timelines whole"
