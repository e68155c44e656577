#!/bin/bash
# Two and three nodes on one PostgreSQL (docs/STORE.md): runs created on one node complete on another;
# one idempotency key sent to two nodes at once makes one run; ten concurrent creates across
# three nodes against a balance for four make exactly four; a run is streamed live (SSE) from a
# node that does not run it; a cancel asked on one node stops the run on another.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/api_common.sh"
. "$(dirname "$0")/pg_common.sh"
. "$(dirname "$0")/multinode_common.sh"
have_image || skip "no sandbox image (make image)"
test_deadline 240
multinode_setup
# 1. Node a alone takes the slow run; with its one worker busy, the runs created on it are
# claimed by the nodes started next.
start_node a --max-concurrent-runs 1
export EPHEMERAL_URL=$(node_url a) # api() without a node: node a
slow=$(EPHEMERAL_URL=$(node_url a) new_run "$SLOW_PROMPT" 50000)
EPHEMERAL_URL=$(node_url a) wait_command_running "$slow"
assert_eq "$(run_node "$slow")" a "node of the slow run"
start_node b
start_node c
ids=()
for i in 1 2 3; do ids+=("$(EPHEMERAL_URL=$(node_url a) new_run "$QUICK_PROMPT" 20000)"); done
for id in "${ids[@]}"; do
    EPHEMERAL_URL=$(node_url a) wait_until "run $id to complete" 600 run_status_is "$id" completed
    node=$(run_node "$id")
    [ "$node" = b ] || [ "$node" = c ] || fail "run $id created on busy a ran on '$node'"
done

# 2. One idempotency key, two nodes, at once: one run, the same answer.
body=$(jq -cn --arg p "$QUICK_PROMPT" '{prompt: $p, max_cost_micros: 20000}')
# The requests' own PIDs: the nodes and the watchdog are background jobs too.
reqs=()
wait_reqs() { for j in "${reqs[@]}"; do wait "$j"; done; reqs=(); }
for n in b c; do
    napi "$n" POST /v1/runs -H 'Content-Type: application/json' -H 'Idempotency-Key: shared-1' \
        -d "$body" >"$TEST_TMP/idem-$n.out" &
    reqs+=($!)
done
wait_reqs
id_b=$(body_of "$(cat "$TEST_TMP/idem-b.out")" | jq -r .id)
id_c=$(body_of "$(cat "$TEST_TMP/idem-c.out")" | jq -r .id)
codes="$(code_of "$(cat "$TEST_TMP/idem-b.out")") $(code_of "$(cat "$TEST_TMP/idem-c.out")")"
case "$codes" in
"201 201" | "201 200" | "200 201") ;;
*"409"*) ;; # the second arrived while the first was in flight: a conflict, no run made
*) fail "idempotent creates on two nodes answered $codes" ;;
esac
made=$(pg_sql eph_nodes "SELECT COUNT(*) FROM runs WHERE prompt = '$QUICK_PROMPT' AND created_at > (SELECT MAX(created_at) FROM runs WHERE id = '${ids[2]}')")
assert_eq "$made" 1 "runs made by one idempotency key on two nodes"
if [[ $codes != *409* ]]; then assert_eq "$id_b" "$id_c" "the run both nodes answered"; fi

# 3. Ten concurrent creates across three nodes against a balance for exactly four (runs that
# block in a long command, so that no reservation is released meanwhile).
key4=$(new_org four 80000)
for i in $(seq 10); do
    n=$(echo a b c | cut -d' ' -f$(((i % 3) + 1)))
    EPHEMERAL_API_KEY=$key4 napi "$n" POST /v1/runs -H 'Content-Type: application/json' \
        -d "$(jq -cn --arg p "$SLOW_PROMPT" '{prompt: $p, max_cost_micros: 20000}')" \
        >"$TEST_TMP/four-$i.out" &
    reqs+=($!)
done
wait_reqs
ok=0 refused=0
for i in $(seq 10); do
    case "$(code_of "$(cat "$TEST_TMP/four-$i.out")")" in
    201) ok=$((ok + 1)) ;;
    402) refused=$((refused + 1)) ;;
    *) fail "create $i: $(cat "$TEST_TMP/four-$i.out")" ;;
    esac
done
assert_eq "$ok/$refused" "4/6" "creates that fit a balance for four"
for i in $(seq 10); do
    id=$(body_of "$(cat "$TEST_TMP/four-$i.out")" | jq -r '.id // empty')
    [ -n "$id" ] && EPHEMERAL_API_KEY=$key4 napi a POST "/v1/runs/$id/cancel" >/dev/null
done

# 4. A run streamed live from a node that does not run it: every event, in order, to the end.
tick=$(EPHEMERAL_URL=$(node_url b) new_run "$TICKER_PROMPT" 30000)
wait_until "the ticker run to be claimed" 400 bash -c "[ -n \"\$(pg_sql eph_nodes \"SELECT node_id FROM runs WHERE id = '$tick' AND node_id IS NOT NULL\")\" ]"
owner=$(run_node "$tick")
viewer=a
[ "$owner" = a ] && viewer=c
curl -sS -N --max-time 60 "$(node_url "$viewer")/v1/runs/$tick/events" \
    -H "Authorization: Bearer $EPHEMERAL_API_KEY" -H 'Accept: text/event-stream' >"$TEST_TMP/sse.txt"
grep -q '^event: worker.destroyed' "$TEST_TMP/sse.txt" || fail "the stream from $viewer did not reach the end: $(tail -5 "$TEST_TMP/sse.txt")"
seqs=$(grep '^id: ' "$TEST_TMP/sse.txt" | cut -d' ' -f2 | tr '\n' ' ')
n=$(wc -w <<<"$seqs")
assert_eq "$seqs" "$(seq -s ' ' 1 "$n") " "event numbers streamed from $viewer (run on $owner)"
assert_eq "$n" "$(napi "$owner" GET "/v1/runs/$tick/events" | sed '$d' | jq '.data | length')" "events streamed"
grep -q 'one' "$TEST_TMP/sse.txt" && grep -q 'three' "$TEST_TMP/sse.txt" || fail "command outputs missing from the stream"
# The viewer streamed it live: it was not settled when the stream began (it has three timed
# commands), and the viewer's log shows no worker for it.
grep -q "$tick" "$TEST_TMP/node-$viewer.log" && grep "$tick" "$TEST_TMP/node-$viewer.log" | grep -q 'charged' &&
    fail "the viewer worked on the run"

# 5. A cancel asked on one node stops the run another node works on.
slow2=$(EPHEMERAL_URL=$(node_url c) new_run "$SLOW_PROMPT" 50000)
EPHEMERAL_URL=$(node_url c) wait_command_running "$slow2"
owner=$(run_node "$slow2")
other=a
[ "$owner" = a ] && other=b
napi "$other" POST "/v1/runs/$slow2/cancel" >/dev/null
wait_until "the cancel to reach node $owner" 200 run_status_is "$slow2" cancelled

# Node a's slow run, which held its one worker from the start: cancelled now, unless a loaded
# machine took longer than its one-minute command to get here and it completed on its own.
napi a POST "/v1/runs/$slow/cancel" >/dev/null
slow_ended() { case "$(run_field "$slow" .status)" in cancelled | completed) return 0 ;; esac; return 1; }
wait_until "the slow run to end" 200 slow_ended
assert_ledger_consistent

# Each node counts its round trips to PostgreSQL in /metrics: a run on a node makes some.
trips() { curl -fsS "$(node_url b)/metrics" | awk '$1 == "ephemeral_store_round_trips_total" {print $2}'; }
t0=$(trips)
[ -n "$t0" ] || fail "no ephemeral_store_round_trips_total on a PostgreSQL node"
id=$(EPHEMERAL_URL=$(node_url b) new_run "$QUICK_PROMPT" 20000)
EPHEMERAL_URL=$(node_url b) wait_until "run $id to complete" 600 run_status_is "$id" completed
[ "$(trips)" -gt "$t0" ] || fail "the round trips did not grow with a run: $t0, then $(trips)"
echo "3 nodes: claims across nodes, one run per key, 4 of 10 creates fit, a live stream and a cancel across nodes"
