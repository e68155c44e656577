#!/bin/bash
# Sandboxes on PostgreSQL with two nodes (docs/SANDBOXES.md): a sandbox made on node a is seen,
# listed and followed on node b; its commands run on a (b answers 409 sandbox_elsewhere naming a);
# a delete sent to b stops it on a and settles it once; and kill -9 of a with a live sandbox gets
# it settled failed (worker_lost) by b once the lease has run out, its money adding up and
# nothing reserved after.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/api_common.sh"
. "$(dirname "$0")/pg_common.sh"
. "$(dirname "$0")/multinode_common.sh"
have_image || skip "no sandbox image (make image)"
test_deadline 240
LEASE=5
multinode_setup '"prices": {"compute_micros_per_second": 100}'
J=(-H 'Content-Type: application/json')
start_node a
start_node b
sbx_status() { napi "$1" GET "/v1/sandboxes/$2" | sed '$d' | jq -r .status; }
sbx_status_is() { [ "$(sbx_status "$1" "$2")" = "$3" ]; }

out=$(napi a POST /v1/sandboxes "${J[@]}" -H 'Prefer: wait=60' -d '{"max_cost_micros": 50000}')
assert_eq "$(code_of "$out")" 201 "create on a ($out)"
id=$(body_of "$out" | jq -r .id)
assert_eq "$(body_of "$out" | jq -r .status)" ready "ready on a"
assert_eq "$(run_node "$id")" a "held by a"
assert_eq "$(sbx_status b "$id")" ready "seen on b"
assert_eq "$(napi b GET /v1/sandboxes | sed '$d' | jq -r '.data[0].id')" "$id" "listed on b"
out=$(napi a POST "/v1/sandboxes/$id/commands" "${J[@]}" -d '{"command": "echo on-a"}')
assert_eq "$(body_of "$out" | jq -r .stdout)" on-a "a command on a"
out=$(napi b POST "/v1/sandboxes/$id/commands" "${J[@]}" -d '{"command": "echo on-b"}')
assert_error "$out" 409 invalid_request_error
assert_eq "$(body_of "$out" | jq -r .error.code)" sandbox_elsewhere "b sends calls to a"
assert_contains "$(body_of "$out" | jq -r .error.message)" "'a'" "b names the node"
assert_contains "$(napi b GET "/v1/sandboxes/$id/events" | sed '$d' | jq -r '[.data[].type] | join(",")')" \
    "sandbox.ready" "its timeline on b"
# A delete through b: a stops it; one settlement.
out=$(napi b DELETE "/v1/sandboxes/$id")
assert_eq "$(code_of "$out")" 200 "delete on b"
wait_until "the sandbox to stop" 400 sbx_status_is a "$id" stopped
run=$(napi b GET "/v1/sandboxes/$id" | sed '$d')
assert_eq "$(jq '.cost.charged_micros + .cost.released_micros' <<<"$run")" 50000 "settled"
assert_eq "$(napi a GET "/v1/sandboxes/$id/events" | sed '$d' | jq '[.data[] | select(.type == "worker.destroyed")] | length')" 1 "settled once"

# kill -9 of a with a live sandbox: b settles it once the lease has run out.
out=$(napi a POST /v1/sandboxes "${J[@]}" -H 'Prefer: wait=60' -d '{"max_cost_micros": 50000}')
lost=$(body_of "$out" | jq -r .id)
napi a POST "/v1/sandboxes/$lost/commands" "${J[@]}" -d '{"command": "true"}' >/dev/null
kill_node a
wait_until "b to settle the lost sandbox" 400 sbx_status_is b "$lost" failed
run=$(napi b GET "/v1/sandboxes/$lost" | sed '$d')
assert_eq "$(jq -r .error.code <<<"$run")" worker_lost "lost"
assert_eq "$(jq '.cost.charged_micros + .cost.released_micros' <<<"$run")" 50000 "lost settled"
assert_eq "$(napi b GET /v1/balance | sed '$d' | jq .reserved_micros)" 0 "nothing reserved after"
assert_ledger_consistent
echo "ok: sandboxes on two nodes"
