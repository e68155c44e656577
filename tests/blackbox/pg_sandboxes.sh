#!/bin/bash
# Sandboxes on PostgreSQL with two nodes (docs/SANDBOXES.md): a sandbox made on node a is seen,
# listed and followed on node b; its commands and files sent to b run on a (b sends them on: an
# answer waited for, a stream, a background command and its kill, files both ways, a listing),
# and a call b was sent by another node is not sent on again (409 sandbox_elsewhere); a delete
# sent to b stops it on a and settles it once; and kill -9 of a with a live sandbox: b answers its
# calls 503 node_unavailable until the lease has run out, then settles it failed (worker_lost),
# its money adding up and nothing reserved after.
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
# Through b, answered by a: the same sandbox (a file written on a is read through b).
napi a PUT "/v1/sandboxes/$id/files/from-a.txt" --data-binary 'made on a' >/dev/null
out=$(napi b POST "/v1/sandboxes/$id/commands" "${J[@]}" -H 'Prefer: wait=30' \
    -d '{"command": "cat from-a.txt; echo; echo on-b"}')
assert_eq "$(code_of "$out")" 200 "a command through b ($out)"
assert_eq "$(body_of "$out" | jq -r .stdout)" $'made on a\non-b' "it ran in a's sandbox"
# Streamed through b as it comes: the output, then the exit.
stream=$(curl -sS -N "$(node_url b)/v1/sandboxes/$id/commands" -H "Authorization: Bearer $EPHEMERAL_API_KEY" \
    "${J[@]}" -H 'Accept: text/event-stream' -d '{"command": "echo streamed; exit 3"}')
assert_contains "$stream" "event: stdout" "a stream through b has the output"
assert_contains "$stream" "streamed" "its text"
assert_contains "$(grep -A1 '^event: exit' <<<"$stream")" '"exit_code":3' "and the exit"
# A client that leaves a stream through b: the command goes on on a, and b's transfer ends once
# a has something to send.
forwarded() { napi b GET /metrics | grep '^ephemeral_forwarded_calls ' | cut -d' ' -f2; }
curl -sS -N --max-time 1 "$(node_url b)/v1/sandboxes/$id/commands" -H "Authorization: Bearer $EPHEMERAL_API_KEY" \
    "${J[@]}" -H 'Accept: text/event-stream' -d '{"command": "sleep 3; echo late >late.txt; echo late"}' >/dev/null 2>&1
assert_eq "$(forwarded)" 1 "the stream's transfer is still on its way"
no_forwarded() { [ "$(forwarded)" = 0 ]; }
wait_until "b's transfer to end" 600 no_forwarded
late_written() { [ "$(napi a GET "/v1/sandboxes/$id/files/late.txt" | sed '$d')" = late ]; }
wait_until "the command left by its client to finish on a" 400 late_written
# A background command through b, its state and its kill through b.
out=$(napi b POST "/v1/sandboxes/$id/commands" "${J[@]}" -d '{"command": "sleep 300", "background": true}')
assert_eq "$(code_of "$out")" 202 "a background command through b ($out)"
cid=$(body_of "$out" | jq -r .id)
assert_eq "$(napi b GET "/v1/sandboxes/$id/commands/$cid" | sed '$d' | jq -r .status)" running "its state through b"
out=$(napi b POST "/v1/sandboxes/$id/commands/$cid/kill")
assert_eq "$(code_of "$out")" 200 "its kill through b ($out)"
cmd_ended() { [ "$(napi a GET "/v1/sandboxes/$id/commands/$cid" | sed '$d' | jq -r .status)" != running ]; }
wait_until "the killed command to end on a" 400 cmd_ended
# Files through b: written there, read on a and through b; listed; an unknown one is a's 404.
head -c 300000 /dev/urandom >"$TEST_TMP/blob"
out=$(napi b PUT "/v1/sandboxes/$id/files/sub/blob.bin" --data-binary @"$TEST_TMP/blob")
assert_eq "$(code_of "$out")" 200 "a file written through b ($out)"
curl -sS -o "$TEST_TMP/blob.a" "$(node_url a)/v1/sandboxes/$id/files/sub/blob.bin" -H "Authorization: Bearer $EPHEMERAL_API_KEY"
cmp -s "$TEST_TMP/blob" "$TEST_TMP/blob.a" || fail "the file read on a differs from what b was sent"
curl -sS -o "$TEST_TMP/blob.b" -D "$TEST_TMP/blob.h" "$(node_url b)/v1/sandboxes/$id/files/sub/blob.bin" -H "Authorization: Bearer $EPHEMERAL_API_KEY"
cmp -s "$TEST_TMP/blob" "$TEST_TMP/blob.b" || fail "the file read through b differs"
assert_contains "$(tr -d '\r' <"$TEST_TMP/blob.h")" "X-Content-Type-Options: nosniff" "a's download headers passed on"
assert_eq "$(napi b GET "/v1/sandboxes/$id/files?path=sub" | sed '$d' | jq -r '[.data[].path] | join(",")')" sub/blob.bin "listed through b"
out=$(napi b GET "/v1/sandboxes/$id/files/none.txt")
assert_error "$out" 404 not_found_error
# A call another node sent on is not sent on again: no loop between nodes that disagree.
out=$(napi b POST "/v1/sandboxes/$id/commands" "${J[@]}" -H 'Ephemeral-Forwarded: c' -d '{"command": "echo no"}')
assert_error "$out" 409 invalid_request_error
assert_eq "$(body_of "$out" | jq -r .error.code)" sandbox_elsewhere "a forwarded call stays"
assert_contains "$(body_of "$out" | jq -r .error.message)" "'a'" "b names the node"
# Another org's key gets b's 404, and a key a would refuse is refused by b too.
other=$(new_org other)
assert_error "$(as "$other" napi b POST "/v1/sandboxes/$id/commands" "${J[@]}" -d '{"command": "true"}')" 404 not_found_error
assert_eq "$(code_of "$(as eph_invalid napi b PUT "/v1/sandboxes/$id/files/x" --data-binary x)")" 401 "no key, no call"
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
out=$(napi b POST "/v1/sandboxes/$lost/commands" "${J[@]}" -d '{"command": "true"}')
assert_error "$out" 503 api_error
assert_eq "$(body_of "$out" | jq -r .error.code)" node_unavailable "a's calls while its lease lasts"
wait_until "b to settle the lost sandbox" 400 sbx_status_is b "$lost" failed
run=$(napi b GET "/v1/sandboxes/$lost" | sed '$d')
assert_eq "$(jq -r .error.code <<<"$run")" worker_lost "lost"
assert_eq "$(jq '.cost.charged_micros + .cost.released_micros' <<<"$run")" 50000 "lost settled"
assert_eq "$(napi b GET /v1/balance | sed '$d' | jq .reserved_micros)" 0 "nothing reserved after"
assert_ledger_consistent
echo "ok: sandboxes on two nodes"
