#!/bin/bash
# max_concurrent_runs_per_org (docs/CONFIG.md): with a cap of 1 and two workers, org A's second run
# stays queued while A's first runs, although a worker is free; that worker runs org B's run
# meanwhile (without the cap, A's two runs would hold both workers and B's run could not finish);
# once A's first run ends, A's second starts. Synchronised on run states only. A bad cap is refused
# at start-up.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/api_common.sh"
test_deadline 240
have_image || skip "no sandbox image (make image)"
# A cap that is not an integer from 0 to 4096 stops the start-up with the reason.
for v in -1 4097 '"2"' 1.5 null; do
    echo "{\"max_concurrent_runs_per_org\": $v}" >"$TEST_TMP/bad.json"
    if "$EPHD" serve --config "$TEST_TMP/bad.json" --listen "127.0.0.1:$(free_port)" \
        --db "$TEST_TMP/bad.db" >"$TEST_TMP/bad.log" 2>&1; then
        fail "max_concurrent_runs_per_org $v was accepted"
    fi
    assert_contains "$(cat "$TEST_TMP/bad.log")" \
        "'max_concurrent_runs_per_org' must be an integer from 0 to 4096" "the refusal of $v"
done

start_api_server '"max_concurrent_runs": 2, "max_concurrent_runs_per_org": 1'
bravo=$(new_org bravo) || fail "second org"

a1=$(new_run "$SLOW_PROMPT" 50000)
a2=$(new_run "$SLOW_PROMPT" 50000)
wait_command_running "$a1"
b=$(as "$bravo" new_run "$QUICK_PROMPT" 20000)
as "$bravo" api GET "/v1/runs/$b" -H 'Prefer: wait=60' >/dev/null
assert_eq "$(as "$bravo" run_field "$b" .status)" completed "B's run, on the free worker"
assert_eq "$(run_field "$a2" .status)" queued "A's second run while A's first runs"

assert_eq "$(code_of "$(api POST "/v1/runs/$a1/cancel")")" 200 "cancel A's first run"
wait_command_running "$a2"
api POST "/v1/runs/$a2/cancel" >/dev/null
assert_eq "$(api GET "/v1/runs/$a2" -H 'Prefer: wait=30' | sed '$d' | jq -r .status)" cancelled "A's second run at the end"
assert_eq "$(api GET /v1/balance | sed '$d' | jq .reserved_micros)" 0 "A's reservations"
echo "the cap held A's second run until its first ended"
