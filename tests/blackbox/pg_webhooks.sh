#!/bin/bash
# Webhooks on two nodes of one PostgreSQL (docs/WEBHOOKS.md, "Durability and claims"): runs
# created on both nodes settle on either, and each event reaches the receiver exactly once, its
# delivery claimed by one node (FOR UPDATE SKIP LOCKED), though both nodes' senders look for due
# deliveries all along; a receiver that answers after 0.2 s keeps several attempts under way at
# once. The history and the pages of the log read the same from either node. Skips where the PostgreSQL server binaries are missing.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/api_common.sh"
. "$(dirname "$0")/webhooks_common.sh"
. "$(dirname "$0")/pg_common.sh"
. "$(dirname "$0")/multinode_common.sh"
have_image || skip "no sandbox image (make image)"
pg_bindir >/dev/null || skip "PostgreSQL server binaries not installed (scripts/setup-deps.sh test)"
test_deadline 240

start_receiver

multinode_setup '"webhooks": {"allow_private_cidrs": ["127.0.0.1/32"], "retry_base_ms": 300}'
start_node a
start_node b
export EPHEMERAL_URL=$(node_url a)
out=$(api POST /v1/webhooks -H 'Content-Type: application/json' \
    -d "{\"url\": \"http://127.0.0.1:$RECV_PORT/slow\"}")
assert_eq "$(code_of "$out")" 201 "create the endpoint: $out"
wh=$(body_of "$out" | jq -r .id)

N=8
ids=()
for i in $(seq $N); do
    n=$([ $((i % 2)) = 0 ] && echo a || echo b)
    ids+=("$(EPHEMERAL_URL=$(node_url "$n") new_run "$QUICK_PROMPT" 20000)")
done
for id in "${ids[@]}"; do
    wait_until "run $id to complete" 600 run_status_is "$id" completed
done
all_delivered() {
    [ "$(napi b GET "/v1/webhooks/$wh/deliveries?limit=100" | sed '$d' |
        jq '[.data[] | select(.status == "delivered")] | length')" = "$N" ]
}
wait_until "every delivery" 600 all_delivered
nodes=$(for id in "${ids[@]}"; do run_node "$id"; done | sort -u | tr '\n' ' ')
echo "runs settled on: $nodes"
# Exactly once each: as many requests as events, each event once, each of a run of ours.
assert_eq "$(wc -l <"$RECV_LOG")" "$N" "requests received"
assert_eq "$(jq -r '.body | fromjson | .id' "$RECV_LOG" | sort -u | wc -l)" "$N" "distinct events received"
assert_eq "$(jq -r '.body | fromjson | .data.id' "$RECV_LOG" | sort | tr '\n' ' ')" \
    "$(printf '%s\n' "${ids[@]}" | sort | tr '\n' ' ')" "the runs of the events"
assert_eq "$(pg_sql eph_nodes "SELECT COUNT(*) FROM webhook_deliveries WHERE attempts <> 1 OR claimed_by IS NOT NULL")" 0 \
    "deliveries attempted more than once, or still claimed"
# Each delivery's history is its one attempt, whichever node made it; the log, read in pages of
# three on the other node, is every delivery once.
assert_eq "$(pg_sql eph_nodes "SELECT COUNT(*) FROM webhook_attempts WHERE webhook_id = '$wh' AND attempt = 1 AND outcome = 'delivered'")" "$N" \
    "attempts in the history"
evt=$(jq -r '.body | fromjson | .id' "$RECV_LOG" | head -1)
assert_eq "$(napi a GET "/v1/webhooks/$wh/deliveries/$evt" | sed '$d' | jq -c '[.history[] | [.attempt, .outcome, .http_status]]')" \
    '[[1,"delivered",200]]' "one delivery's history"
paged="" after="" more=true
while [ "$more" = true ]; do
    page=$(napi b GET "/v1/webhooks/$wh/deliveries?limit=3${after:+&after=$after}" | sed '$d')
    after=$(jq -r '.data[-1].event_id' <<<"$page")
    paged="$paged$(jq -r '.data[].event_id' <<<"$page")"$'\n'
    more=$(jq -r .has_more <<<"$page")
done
assert_eq "$(grep -c . <<<"$paged")" "$N" "deliveries read in pages"
assert_eq "$(grep . <<<"$paged" | sort -u | wc -l)" "$N" "distinct deliveries in the pages"
echo "$N events, each delivered once across two nodes"
