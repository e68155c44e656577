#!/bin/bash
# A lost node (docs/STORE.md). kill -9 of a node holding four running runs: the survivor finishes all
# four as failed (worker_lost) within the lease, each settled once, charged compute up to the
# last lease renewal (the checkpoint), nothing reserved afterwards, and no sandbox of the dead
# node left once it restarts. Then a node paused (SIGSTOP) past its lease and resumed: its runs
# are settled once (by the other node), and it stops their sandboxes.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/api_common.sh"
. "$(dirname "$0")/pg_common.sh"
. "$(dirname "$0")/multinode_common.sh"
have_image || skip "no sandbox image (make image)"
test_deadline 240
LEASE=5
multinode_setup
[ "$(sleepers)" -eq 0 ] || skip "another process already runs '$MARKER'"

# ---- kill -9 ----
start_node a
ids=()
for i in 1 2 3 4; do ids+=("$(EPHEMERAL_URL=$(node_url a) new_run "$SLOW_PROMPT" 50000)"); done
for id in "${ids[@]}"; do EPHEMERAL_URL=$(node_url a) wait_command_running "$id"; done
start_node b
# The runs are blocked in their command: no model call or tool records progress now, so compute
# that grows in the database comes from the lease renewals (the checkpoint).
declare -A c0 before
for id in "${ids[@]}"; do c0[$id]=$(pg_sql eph_nodes "SELECT compute_micros FROM runs WHERE id = '$id'"); done
for id in "${ids[@]}"; do
    wait_until "a renewal to checkpoint $id" 200 bash -c \
        "[ \"\$(pg_sql eph_nodes \"SELECT compute_micros FROM runs WHERE id = '$id'\")\" -gt ${c0[$id]} ]"
done
for id in "${ids[@]}"; do before[$id]=$(pg_sql eph_nodes "SELECT compute_micros FROM runs WHERE id = '$id'"); done
killed_at=$(date +%s)
kill_node a
for id in "${ids[@]}"; do
    EPHEMERAL_URL=$(node_url b) wait_until "b to settle $id" 400 run_status_is "$id" failed
done
took=$(($(date +%s) - killed_at))
[ "$took" -le $((LEASE + 10)) ] || fail "lost runs settled after $took s (lease $LEASE s)"
for id in "${ids[@]}"; do
    run=$(napi b GET "/v1/runs/$id" | sed '$d')
    assert_eq "$(jq -r .error.code <<<"$run")" worker_lost "error of $id"
    assert_eq "$(jq '.cost.charged_micros + .cost.released_micros' <<<"$run")" 50000 "settled $id"
    c=$(jq .cost.compute_micros <<<"$run")
    [ "${before[$id]}" -gt 0 ] || fail "no compute checkpointed for $id before the kill"
    [ "$c" -ge "${before[$id]}" ] || fail "$id charged compute $c, below its checkpoint ${before[$id]}"
    types=$(napi b GET "/v1/runs/$id/events" | sed '$d' | jq -r '[.data[].type] | join(",")')
    assert_contains "$types" "sandbox.destroyed,run.failed,worker.destroyed" "closing events of $id"
    assert_eq "$(grep -o 'worker.destroyed' <<<"$types" | wc -l)" 1 "worker.destroyed events of $id"
done
assert_eq "$(napi b GET /v1/balance | sed '$d' | jq .reserved_micros)" 0 "reserved after the settlements"
assert_ledger_consistent
grep -q 'lease of node a expired' "$TEST_TMP/node-b.log" || fail "b did not log the lost lease"
# The dead node's sandboxes died with it; restarted, it leaves nothing behind and settles nothing.
start_node a
wait_until "the dead node's sandboxes to be gone" 200 no_sleepers
grep -q 'worker_lost' "$TEST_TMP/node-a.log" && fail "the restarted node settled a run again"

# ---- SIGSTOP past the lease ----
stop_node b
paused=()
for i in 1 2; do paused+=("$(EPHEMERAL_URL=$(node_url a) new_run "$SLOW_PROMPT" 50000)"); done
for id in "${paused[@]}"; do EPHEMERAL_URL=$(node_url a) wait_command_running "$id"; done
start_node b
kill -STOP "$(node_pid a)"
for id in "${paused[@]}"; do
    EPHEMERAL_URL=$(node_url b) wait_until "b to settle paused $id" 400 run_status_is "$id" failed
done
kill -CONT "$(node_pid a)"
# Resumed, a finds its leases taken at its next renewal and stops the sandboxes.
wait_until "a to stop its sandboxes" 300 no_sleepers
wait_until "a to log the lost lease" 100 grep -q 'lease lost' "$TEST_TMP/node-a.log"
for id in "${paused[@]}"; do
    run=$(napi a GET "/v1/runs/$id" | sed '$d')
    assert_eq "$(jq -r .error.code <<<"$run")" worker_lost "paused $id after a resumed"
    assert_eq "$(pg_sql eph_nodes "SELECT COUNT(*) FROM ledger WHERE run_id = '$id' AND kind = 'charge'")" 1 \
        "charges of paused $id"
done
assert_ledger_consistent
assert_eq "$(napi a GET /v1/balance | sed '$d' | jq .reserved_micros)" 0 "reserved at the end"
# a still works.
q=$(EPHEMERAL_URL=$(node_url a) new_run "$QUICK_PROMPT" 20000)
EPHEMERAL_URL=$(node_url a) wait_until "a quick run after the pause" 400 run_status_is "$q" completed
echo "4 runs of a killed node settled once by the survivor in $took s; a paused node stopped its sandboxes"
