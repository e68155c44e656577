#!/bin/bash
# A replay of a run that used the broker (docs/AGENT.md): the original fetches from a loopback upstream
# with curl through the proxy and with web_fetch; its replay gets the recorded answers, the
# upstream sees no request, and a request that was not recorded (its URL made of random bytes) gets
# 403 not_recorded: a divergence, and nothing upstream either.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agent_common.sh"
. "$(dirname "$0")/broker_common.sh"
cd "$TOP"

upstream_start site
U=$UP_PORT
fake_start rec "$(jq -nc \
    --argjson c1 "$(shell_call b1 "curl -sS http://127.0.0.1:$U/plain")" \
    --argjson c2 "$(jq -nc --arg u "http://127.0.0.1:$U/html" '{id: "b2", name: "web_fetch", arguments: ({url: $u} | tojson)}')" \
    --argjson c3 "$(shell_call b3 "curl -s -w ' %{http_code}' http://127.0.0.1:$U/plain?n=\$(od -An -tx1 -N8 /dev/urandom | tr -d ' \\n')")" \
    '[{tool_calls: [$c1, $c2, $c3]}, {text: "fetched"}]')"
broker_server "$(jq -s . <(fake_model rec openai rec))"

orig=$(run_create '{"prompt": "fetch", "model": "rec", "web": true, "max_cost_micros": 200000}')
run=$(run_wait "$orig")
assert_eq "$(jq -r .status <<<"$run")" completed "original ($(jq -c .error <<<"$run"))"
before=$(upstream_requests site | jq length)
assert_eq "$before" 3 "the original's requests upstream"
api GET "/v1/runs/$orig/transcript" | sed '$d' >"$TEST_TMP/orig.jsonl"
assert_eq "$(jq -s '[.[] | select(.kind == "exchange")] | length >= 2' "$TEST_TMP/orig.jsonl")" true \
    "the exchanges are in the transcript"

rep=$(run_create "$(jq -nc --arg of "$orig" '{replay_of: $of, max_cost_micros: 200000}')")
run=$(run_wait "$rep")
assert_eq "$(jq -r .status <<<"$run")" completed "replay ($(jq -c .error <<<"$run"))"
assert_eq "$(upstream_requests site | jq length)" "$before" "no request reached the upstream"
# The recorded answers: the same results; the random URL was not recorded: 403 not_recorded.
ev=$(run_events "$rep")
assert_eq "$(jq -c '[.data[] | select(.type == "replay.divergence") | .data.call_id]' <<<"$ev")" '["b3"]' \
    "only the unrecorded request diverged"
assert_eq "$(jq -r .replay.divergences <<<"$run")" 1 "the run counts it"
replayed=$(jq -r '.data[] | select(.type == "replay.divergence") | .data.replayed | fromjson | .stdout' <<<"$ev")
assert_contains "$replayed" "not_recorded" "the broker said why"
assert_contains "$replayed" " 403" "with 403"
assert_contains "$(jq -c '[.data[] | select(.type == "web.request") | .data.denied]' <<<"$ev")" "not_recorded" \
    "a denied web.request event"
echo "ok"
