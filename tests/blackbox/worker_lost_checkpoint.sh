#!/bin/bash
# A run lost in a crash is charged compute up to the last moment known (docs/STORE.md, issue 10): the
# lease renewal checkpoints compute while a command blocks, so after kill -9 and a restart the
# run is settled as worker_lost with at least the checkpointed compute (not 0, not only what the
# first model call recorded), and its timeline says its sandbox was destroyed. SQLite, one node.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/api_common.sh"
have_image || skip "no sandbox image (make image)"
test_deadline 120
FIXTURES=$TOP/tests/fixtures/multinode
api_config "$TEST_TMP/config.json" '"lease_seconds": 3, "lease_renew_seconds": 1'
start_server --config "$TEST_TMP/config.json" --sandbox namespaces
id=$(new_run "$SLOW_PROMPT" 50000)
wait_command_running "$id"
compute() { sqlite3 -cmd '.timeout 5000' "$DB" "SELECT compute_micros FROM runs WHERE id = '$id'"; }
c0=$(compute)
# Blocked in its command, the run records no progress of its own: growth is the checkpoint.
grows() { [ "$(compute)" -gt "$c0" ]; }
wait_until "a renewal to checkpoint compute" 200 grows
c1=$(compute)
[ "$(sqlite3 "$DB" "SELECT node_id IS NOT NULL AND lease_expires_at > 0 FROM runs WHERE id = '$id'")" = 1 ] ||
    fail "the run has no lease"
kill -KILL "$SERVER_PID"
wait "$SERVER_PID" 2>/dev/null
port=${EPHEMERAL_URL##*:}
"$EPHD" serve --listen "127.0.0.1:$port" --db "$DB" --config "$TEST_TMP/config.json" \
    --sandbox namespaces >>"$SERVER_LOG" 2>&1 &
SERVER_PID=$!
_pids+=("$SERVER_PID")
for _ in $(seq 300); do curl -fsS "$EPHEMERAL_URL/healthz" >/dev/null 2>&1 && break; sleep 0.05; done
run=$(api GET "/v1/runs/$id" | sed '$d')
assert_eq "$(jq -r .error.code <<<"$run")" worker_lost "error after the crash"
c=$(jq .cost.compute_micros <<<"$run")
[ "$c" -ge "$c1" ] || fail "charged compute $c is below the checkpoint $c1"
[ "$c1" -gt "$c0" ] || fail "no checkpoint"
assert_eq "$(jq '.cost.charged_micros + .cost.released_micros' <<<"$run")" 50000 "settled"
types=$(api GET "/v1/runs/$id/events" | sed '$d' | jq -r '[.data[].type] | join(",")')
assert_contains "$types" "sandbox.destroyed,run.failed,worker.destroyed" "closing events"
seqs=$(api GET "/v1/runs/$id/events" | sed '$d' | jq -r '[.data[].seq] | map(tostring) | join(",")')
n=$(api GET "/v1/runs/$id/events" | sed '$d' | jq '.data | length')
assert_eq "$seqs" "$(seq -s, 1 "$n")" "event numbers"
echo "lost run charged $c micros of compute (checkpoint $c1, first record $c0)"
