#!/bin/bash
# Fencing (docs/RUN.md, "Fencing"): a node stopped (SIGSTOP) on PostgreSQL with a run executing.
# Its sandbox's processes are gone before the run's lease expires (the fence's watchdog, a process
# of its own, kills the machine at the fence while the node cannot run), the other node settles the
# run worker_lost, the ledger adds up with the compute charged to the last checkpoint, and once
# resumed the stopped node stores nothing more for the run (no event after the settlement, no
# second settlement), makes no model call (the fake model server counts them) and says so once.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/api_common.sh"
. "$(dirname "$0")/pg_common.sh"
. "$(dirname "$0")/multinode_common.sh"
. "$(dirname "$0")/agent_common.sh"
test_deadline 180
LEASE=6
multinode_setup
# The run's command, a marker of this test alone (other tests may run the fixtures' at the same
# time on this host).
MARKER="sleep 71.$$"
[ "$(sleepers)" -eq 0 ] || skip "another process already runs '$MARKER'"
has_sleeper() { [ "$(sleepers)" -ge 1 ]; }
# The model: one command that blocks, then answers that would finish the run (never asked for).
fake_start model "$(jq -nc --arg cmd "echo started; $MARKER" \
    '[{tool_calls: [{id: "call_1", name: "shell", arguments: ({command: $cmd} | tojson)}],
       finish_reason: "tool_calls"}, {text: "done"}, {text: "done"}]')"
jq -n --argjson m "$(fake_model fake/model openai model)" --arg key "$TEST_TMP/secret.key" \
    --argjson lease "$LEASE" \
    '{default_model: "fake/model", models: [$m], secret_key_file: $key, shutdown_grace_seconds: 1,
      lease_seconds: $lease, lease_renew_seconds: 1}' >"$TEST_TMP/config.json" || fail "config"

start_node a
id=$(EPHEMERAL_URL=$(node_url a) new_run "block in a long command" 50000)
EPHEMERAL_URL=$(node_url a) wait_command_running "$id"
wait_until "the run's command to run in its sandbox" 200 has_sleeper
start_node b
calls=$(wc -l <"$TEST_TMP/model.log")
assert_eq "$calls" 1 "model calls before the stop"

kill -STOP "$(node_pid a)"
# Poll the store and the host: once the lease has expired by the store's clock, the sandbox's
# processes must already be gone (each look at the processes comes after the look at the lease).
expired_seen=0 gone_seen=0
for _ in $(seq 600); do
    if [ "$(pg_sql eph_nodes "SELECT lease_expires_at < (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint FROM runs WHERE id = '$id'")" = t ]; then
        expired_seen=1
        [ "$(sleepers)" -eq 0 ] || fail "the stopped node's sandbox still runs after the lease expired"
    fi
    [ "$(sleepers)" -eq 0 ] && gone_seen=1
    [ "$(pg_sql eph_nodes "SELECT status FROM runs WHERE id = '$id'")" = failed ] && break
    sleep 0.05
done
assert_eq "$(pg_sql eph_nodes "SELECT status FROM runs WHERE id = '$id'")" failed "status settled by b"
assert_eq "$expired_seen$gone_seen" 11 "lease expiry and the sandbox's end observed"
[ "$(sleepers)" -eq 0 ] || fail "the sandbox still runs after the settlement"
run=$(napi b GET "/v1/runs/$id" | sed '$d')
assert_eq "$(jq -r .error.code <<<"$run")" worker_lost "error of the lost run"
assert_eq "$(jq '.cost.charged_micros + .cost.released_micros' <<<"$run")" 50000 "charged + released"
assert_eq "$(jq '.cost.model_micros + .cost.web_micros + .cost.compute_micros' <<<"$run")" \
    "$(jq .cost.charged_micros <<<"$run")" "charged split"
# The compute: charged to the last checkpoint (renewals every second before the stop).
[ "$(jq .cost.compute_micros <<<"$run")" -gt 0 ] || fail "no compute charged: $run"
events=$(napi b GET "/v1/runs/$id/events" | sed '$d')
last=$(jq '[.data[].seq] | max' <<<"$events")
assert_eq "$(jq -r '.data[-1].type' <<<"$events")" worker.destroyed "last event"

kill -CONT "$(node_pid a)"
# Resumed, a finds the run settled elsewhere, stops its work and does not settle it again.
wait_until "a to give the run up" 400 grep -q "run $id: settled elsewhere" "$TEST_TMP/node-a.log"
assert_eq "$(napi b GET "/v1/runs/$id/events" | sed '$d' | jq '[.data[].seq] | max')" "$last" \
    "last event after a resumed"
assert_eq "$(pg_sql eph_nodes "SELECT COUNT(*) FROM events WHERE run_id = '$id' AND seq > $last")" 0 \
    "events stored after the settlement"
assert_eq "$(pg_sql eph_nodes "SELECT COUNT(*) FROM ledger WHERE run_id = '$id' AND kind = 'charge'")" 1 \
    "charges of the run"
assert_eq "$(wc -l <"$TEST_TMP/model.log")" "$calls" "model calls after the resume"
assert_ledger_consistent
assert_eq "$(napi b GET /v1/balance | sed '$d' | jq .reserved_micros)" 0 "reserved at the end"
grep -q "run $id: its sandbox was killed at its fence" "$TEST_TMP/node-a.log" ||
    fail "a did not report its fenced sandbox"
# Said once, not in a stream of errors.
lost=$(grep -c "run $id: lease lost" "$TEST_TMP/node-a.log")
assert_eq "$lost" 1 "lines saying a lost the run"
grep -q -e "cannot store event" -e "cannot settle" "$TEST_TMP/node-a.log" &&
    fail "a logged errors for the run it lost: $(grep -e 'cannot store event' -e 'cannot settle' "$TEST_TMP/node-a.log" | head -3)"
echo "a stopped node's sandbox was gone before its lease expired; resumed, it wrote and asked nothing"
