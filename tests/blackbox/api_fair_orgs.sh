#!/bin/bash
# Fair scheduling across orgs (docs/RUN.md, "Fair claims"): two workers; org A queues six runs that
# block in a long command, then org B one quick run. When a worker comes free (one of A's runs is
# cancelled, so that the test decides when), it takes B's run, not A's third: B's run starts
# before A's third, while A's last three still wait. A global FIFO starts A's third and leaves B waiting
# behind A's whole backlog. Synchronised on run states only.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/api_common.sh"
test_deadline 240
have_image || skip "no sandbox image (make image)"
start_api_server '"max_concurrent_runs": 2'
bravo=$(new_org bravo) || fail "second org"

a=()
for i in 0 1 2 3 4 5; do a[$i]=$(new_run "$SLOW_PROMPT" 50000); done
wait_command_running "${a[0]}"
wait_command_running "${a[1]}"
for i in 2 3 4 5; do assert_eq "$(run_field "${a[$i]}" .status)" queued "A's run $i with both workers busy"; done

b=$(as "$bravo" new_run "$QUICK_PROMPT" 20000)
assert_eq "$(as "$bravo" run_field "$b" .status)" queued "B's run with both workers busy"

# A worker comes free: the next run to leave the queue is B's.
assert_eq "$(code_of "$(api POST "/v1/runs/${a[0]}/cancel")")" 200 "cancel A's first run"
# B's run starts next (a quick one: its worker may be on A's third by the time this looks), and
# A's third only after it; the others wait.
as "$bravo" api GET "/v1/runs/$b" -H 'Prefer: wait=60' >/dev/null
assert_eq "$(as "$bravo" run_field "$b" .status)" completed "B's run"
wait_until "A's third run to start" 800 run_status_is "${a[2]}" running
b_started=$(as "$bravo" run_field "$b" .started_at)
a_started=$(run_field "${a[2]}" .started_at)
[[ $b_started < $a_started ]] || fail "B's run started at $b_started, A's third at $a_started"
for i in 3 4 5; do assert_eq "$(run_field "${a[$i]}" .status)" queued "A's run $i"; done
for i in 1 2 3 4 5; do api POST "/v1/runs/${a[$i]}/cancel" >/dev/null; done
for i in 1 2 3 4 5; do
    assert_eq "$(api GET "/v1/runs/${a[$i]}" -H 'Prefer: wait=30' | sed '$d' | jq -r .status)" cancelled "A's run $i at the end"
done
assert_eq "$(api GET /v1/balance | sed '$d' | jq .reserved_micros)" 0 "A's reservations"
echo "B's run went before A's backlog of four"
