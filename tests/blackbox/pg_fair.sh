#!/bin/bash
# Fair claims across nodes (docs/STORE.md, "Fair claims"): two nodes of one worker each on one
# PostgreSQL. Org A creates six runs on node a that block in a long command, then org B one quick
# run, also on node a. When node b's worker comes free (its run of A's cancelled), node b claims
# B's run from the store, not A's third. Then, with max_concurrent_runs_per_org 1, the cap counts
# the runs of every node: with one of A's runs on node a, node b leaves A's next run queued and
# runs B's. Synchronised on run states only.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/api_common.sh"
. "$(dirname "$0")/pg_common.sh"
. "$(dirname "$0")/multinode_common.sh"
have_image || skip "no sandbox image (make image)"
test_deadline 300
multinode_setup
start_node a --max-concurrent-runs 1
start_node b --max-concurrent-runs 1
export EPHEMERAL_URL=$(node_url a)
bravo=$(new_org bravo) || fail "second org"

a=()
for i in 0 1 2 3 4 5; do a[$i]=$(new_run "$SLOW_PROMPT" 50000); done
two_running() {
    [ "$(pg_sql eph_nodes "SELECT COUNT(*) FROM runs WHERE status = 'running' AND id IN ('${a[0]}', '${a[1]}')")" = 2 ]
}
wait_until "A's first two runs to run, one on each node" 800 two_running
on_b=${a[0]}
[ "$(run_node "$on_b")" = b ] || on_b=${a[1]}
assert_eq "$(run_node "$on_b")" b "node of one of A's first two runs"
b=$(as "$bravo" new_run "$QUICK_PROMPT" 20000)

assert_eq "$(code_of "$(api POST "/v1/runs/$on_b/cancel")")" 200 "cancel A's run on node b"
# B's run starts next (a quick one: its worker may be on A's third by the time this looks), and
# A's third only after it; the others wait.
as "$bravo" api GET "/v1/runs/$b" -H 'Prefer: wait=60' >/dev/null
assert_eq "$(as "$bravo" run_field "$b" .status)" completed "B's run"
assert_eq "$(run_node "$b")" b "node of B's run (created on node a)"
wait_until "A's third run to start" 800 run_status_is "${a[2]}" running
b_started=$(as "$bravo" run_field "$b" .started_at)
a_started=$(run_field "${a[2]}" .started_at)
[[ $b_started < $a_started ]] || fail "B's run started at $b_started, A's third at $a_started"
for i in 3 4 5; do assert_eq "$(run_field "${a[$i]}" .status)" queued "A's run $i"; done
# Node a's queue keeps only what still waits: the runs node b took left it (their events said so).
queue_depth_a() { [ "$(curl -fsS "$(node_url a)/metrics" | awk '$1 == "ephemeral_queue_depth" {print $2}')" = 3 ]; }
wait_until "node a's queue to hold A's three waiting runs" 400 queue_depth_a
for i in 0 1 2 3 4 5; do api POST "/v1/runs/${a[$i]}/cancel" >/dev/null; done
for i in 0 1 2 3 4 5; do
    assert_eq "$(api GET "/v1/runs/${a[$i]}" -H 'Prefer: wait=30' | sed '$d' | jq -r .status)" cancelled "A's run $i"
done

# The cap, across nodes.
stop_node a
stop_node b
api_config "$TEST_TMP/config.json" \
    '"lease_seconds": 10, "lease_renew_seconds": 1, "max_concurrent_runs_per_org": 1'
start_node a --max-concurrent-runs 1
start_node b --max-concurrent-runs 1
export EPHEMERAL_URL=$(node_url a)
c1=$(new_run "$SLOW_PROMPT" 50000)
wait_command_running "$c1"
c2=$(new_run "$SLOW_PROMPT" 50000)
b2=$(as "$bravo" new_run "$QUICK_PROMPT" 20000)
as "$bravo" api GET "/v1/runs/$b2" -H 'Prefer: wait=60' >/dev/null
assert_eq "$(as "$bravo" run_field "$b2" .status)" completed "B's run beside A's capped one"
assert_eq "$(run_field "$c2" .status)" queued "A's second run while its first runs on node $(run_node "$c1")"
assert_eq "$(code_of "$(api POST "/v1/runs/$c1/cancel")")" 200 "cancel A's first run"
wait_command_running "$c2"
api POST "/v1/runs/$c2/cancel" >/dev/null
assert_eq "$(api GET "/v1/runs/$c2" -H 'Prefer: wait=30' | sed '$d' | jq -r .status)" cancelled "A's second run"
assert_ledger_consistent
echo "fair across two nodes; the cap counted both"
