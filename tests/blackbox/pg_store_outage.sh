#!/bin/bash
# A store outage longer than the lease (docs/RUN.md, "Fencing"): PostgreSQL stopped past the lease
# under two nodes, each with runs executing a command that takes a while, then started again.
# Every node was cut off alike, so nobody's lease counts the time the store was away: every run
# completes normally, none is settled worker_lost, each node paused its sandboxes at the fence and
# resumed them once its lease was renewed, the ledger adds up, and the logs carry no stream of
# errors (each outage said once, not once per operation or per retry).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/api_common.sh"
. "$(dirname "$0")/pg_common.sh"
. "$(dirname "$0")/multinode_common.sh"
have_image || skip "no sandbox image (make image)"
test_deadline 240
LEASE=4
multinode_setup
# Runs that take a while: one command of some seconds (a marker of this test), then the answer.
MARKER="sleep 14.417"
[ "$(sleepers)" -eq 0 ] || skip "another process already runs '$MARKER'"
FIXTURES=$TEST_TMP/fixtures
mkdir -p "$FIXTURES/outage"
jq -n '{prompt: "fixture: outlast the store", shell: true, max_cost_micros: 50000}' \
    >"$FIXTURES/outage/request.json"
cat >"$FIXTURES/outage/transcript.jsonl" <<'JSONL'
{"content": null, "finish_reason": "tool_calls", "tool_calls": [{"id": "call_1", "name": "shell", "arguments": {"command": "echo started; sleep 14.417; echo slept"}}], "usage": {"input_tokens": 900, "output_tokens": 40}}
{"content": "{{call_1.stdout:2}}", "finish_reason": "stop", "tool_calls": [], "usage": {"input_tokens": 1000, "output_tokens": 10}}
JSONL
# Two workers a node: a node busy with two runs claims none of the other's.
api_config "$TEST_TMP/config.json" \
    "\"lease_seconds\": $LEASE, \"lease_renew_seconds\": 1, \"max_concurrent_runs\": 2"

start_node a
ids=()
for _ in 1 2; do ids+=("$(EPHEMERAL_URL=$(node_url a) new_run "fixture: outlast the store" 50000)"); done
for id in "${ids[@]}"; do EPHEMERAL_URL=$(node_url a) wait_command_running "$id"; done
start_node b
for _ in 1 2; do ids+=("$(EPHEMERAL_URL=$(node_url b) new_run "fixture: outlast the store" 50000)"); done
for id in "${ids[@]}"; do EPHEMERAL_URL=$(node_url a) wait_command_running "$id"; done
wait_until "the four commands to run" 200 bash -c "[ \"\$(pgrep -f '$MARKER' | wc -l)\" -ge 4 ]"
declare -A owner
for id in "${ids[@]}"; do owner[$id]=$(run_node "$id"); done
assert_eq "${owner[${ids[0]}]}${owner[${ids[1]}]}${owner[${ids[2]}]}${owner[${ids[3]}]}" aabb \
    "nodes working on the runs"

pg_stop
stopped_at=$(date +%s%N)
# The store stays away past the lease (and every fence).
wait_until "the outage to outlast the lease" 400 \
    bash -c "[ \$(( \$(date +%s%N) - $stopped_at )) -gt $(( (LEASE + 2) * 1000000000 )) ]"
pg_restart_same

finished() { case $(EPHEMERAL_URL=$(node_url a) run_field "$1" .status) in queued | starting | running) return 1 ;; esac; }
for id in "${ids[@]}"; do wait_until "run $id to finish" 600 finished "$id"; done
for id in "${ids[@]}"; do
    run=$(napi b GET "/v1/runs/$id" | sed '$d')
    assert_eq "$(jq -r '.error.code // "none"' <<<"$run")" none "error of $id"
    assert_eq "$(jq -r .status <<<"$run")" completed "status of $id"
    assert_eq "$(jq -r .result <<<"$run")" slept "result of $id"
    assert_eq "$(jq '.cost.charged_micros + .cost.released_micros' <<<"$run")" 50000 "settled $id"
    assert_eq "$(run_node "$id")" "${owner[$id]}" "node of $id"
done
assert_ledger_consistent
assert_eq "$(napi a GET /v1/balance | sed '$d' | jq .reserved_micros)" 0 "reserved at the end"
for n in a b; do
    log=$TEST_TMP/node-$n.log
    grep -q "worker_lost" "$log" && fail "node $n settled a run as lost: $(grep worker_lost "$log" | head -3)"
    grep -q -e "cannot store event" -e "cannot settle" -e "lease lost" "$log" &&
        fail "node $n: $(grep -e 'cannot store event' -e 'cannot settle' -e 'lease lost' "$log" | head -3)"
    # Its leases could not be renewed in time: it paused its sandboxes, and resumed them.
    if printf '%s\n' "${owner[@]}" | grep -qx "$n"; then
        grep -q "sandbox is paused until it is" "$log" || fail "node $n did not pause its sandboxes"
        grep -q "its sandbox runs again" "$log" || fail "node $n did not resume its sandboxes"
    fi
    # No stream of errors: no warning or error says the same thing more than once per run.
    worst=$(grep -E '^[^ ]+ (warn|error)' "$log" | cut -d' ' -f3- | sed -E 's/run_[0-9a-f]+/RUN/g; s/[0-9]+ ms/N ms/g' |
        sort | uniq -c | sort -rn | head -1)
    count=$(awk '{print $1}' <<<"$worst")
    [ "${count:-0}" -le 4 ] || fail "node $n repeats itself: $worst"
done
echo "4 runs on 2 nodes outlasted a $((LEASE + 2)) s store outage (lease $LEASE s), paused and resumed"
