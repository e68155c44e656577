#!/bin/bash
# The record and replay of a real run (docs/API.md transcript, 8.5 replay_of), through the real
# server, a real sandbox and the fake model server: a run's transcript is JSON Lines whose first
# line is the run; a zero-data-retention run and another org's run have none; replay_of refuses a
# bad id, another org's run, a zero-data-retention run, an unfinished run and any widening of the
# permissions, each with its param. Then a replay of the run: no request reaches the model, model
# cost 0, the same commands run, the deterministic result equal, a nondeterministic one
# (16 bytes of /dev/urandom) listed as a divergence in events, transcript and run object.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agent_common.sh"
. "$(dirname "$0")/api_common.sh"
cd "$TOP"

call() { jq -nc --arg id "$1" --arg n "$2" --arg a "$3" '{id: $id, name: $n, arguments: $a}'; }
fake_start rec "$(jq -nc \
    --argjson c1 "$(call r1 shell '{"command": "echo same-every-time; od -An -tx1 -N16 /dev/urandom"}')" \
    --argjson c2 "$(call r2 write_file '{"path": "a.txt", "content": "fixed\n"}')" \
    --argjson c3 "$(call r3 shell '{"command": "cat a.txt"}')" \
    --argjson c4 "$(call r4 edit_file '{"path": "a.txt", "old": "fixed", "new": "edited"}')" \
    --argjson c5 "$(call r5 read_file '{"path": "a.txt"}')" \
    --argjson c6 "$(call r6 launch_missiles '{"target": "moon"}')" \
    --argjson c7 "$(call r7 web_fetch '{"url": "https://example.com/"}')" \
    --argjson c8 "$(call r8 shell '{"command": "seq 1 30000"}')" \
    '[{tool_calls: [$c1]}, {tool_calls: [$c2, $c3, $c4, $c5]}, {tool_calls: [$c6, $c7, $c8]},
      {text: "recorded answer"}]')"
fake_start other '[{"text": "forgotten"}, {"text": "no shell"}]'
fake_start slow "$(jq -nc --argjson c "$(call s1 shell '{"command": "sleep 20"}')" \
    '[{tool_calls: [$c]}, {text: "late"}]')"
agent_server "$(jq -s . <(fake_model rec openai rec) <(fake_model other openai other) \
    <(fake_model slow openai slow))"

orig=$(run_create '{"prompt": "record me", "model": "rec", "web": false, "max_cost_micros": 200000}')
zdr=$(run_create '{"prompt": "forget me", "model": "other", "zero_data_retention": true,
                   "max_cost_micros": 200000}')
slow=$(run_create '{"prompt": "take your time", "model": "slow", "max_cost_micros": 200000}')
run=$(run_wait "$orig")
assert_eq "$(jq -r .status <<<"$run")" completed "original ($(jq -c .error <<<"$run"))"
assert_eq "$(jq -r .replay <<<"$run")" null "an original has no replay object"
run_wait "$zdr" >/dev/null

# ---- the transcript ----
hdr="$TEST_TMP/transcript.headers"
curl -sS -D "$hdr" -o "$TEST_TMP/orig.jsonl" "$EPHEMERAL_URL/v1/runs/$orig/transcript" \
    -H "Authorization: Bearer $EPHEMERAL_API_KEY" || fail "transcript"
grep -qi '^content-type: application/x-ndjson' "$hdr" || fail "transcript type: $(cat "$hdr")"
jq -e . "$TEST_TMP/orig.jsonl" >/dev/null || fail "a transcript line is not JSON"
first=$(head -n 1 "$TEST_TMP/orig.jsonl")
assert_eq "$(jq -r '[.kind, .id, .model, .status, .prompt, .permissions.shell] | join(" ")' <<<"$first")" \
    "run $orig rec completed record me true" "the transcript's first line"
assert_eq "$(jq -rs '[.[] | .kind] - ["run", "model_turn", "tool_call", "exchange", "divergence"] | length' \
    "$TEST_TMP/orig.jsonl")" 0 "only the kinds of the record"
assert_eq "$(jq -s '[.[] | select(.kind != "run") | .seq] | . == sort' "$TEST_TMP/orig.jsonl")" true \
    "lines in timeline order"
# Every model turn and every tool call, rejected ones and a long output included, is a line.
assert_eq "$(jq -sc '[.[] | select(.kind == "model_turn") | .turn]' "$TEST_TMP/orig.jsonl")" \
    '[1,2,3,4]' "the model turns"
assert_eq "$(jq -sc '[.[] | select(.kind == "tool_call") | [.call.id, .type]]' "$TEST_TMP/orig.jsonl")" \
    '[["r1","shell.command"],["r2","file.write"],["r3","shell.command"],["r4","file.edit"],["r5","file.read"],["r6","tool.rejected"],["r7","tool.rejected"],["r8","shell.command"]]' \
    "the tool calls"
assert_contains "$(jq -sr '.[] | select(.kind == "tool_call" and .call.id == "r8") | .result' "$TEST_TMP/orig.jsonl")" \
    "30000" "the long output's tail is in its result"

# The CLI saves the same record.
"$EPH" transcript "$orig" >"$TEST_TMP/cli.jsonl" || fail "ephemeral transcript"
cmp -s "$TEST_TMP/cli.jsonl" "$TEST_TMP/orig.jsonl" || fail "ephemeral transcript differs from the API's"
"$EPH" transcript "$zdr" >"$TEST_TMP/zdr.jsonl" 2>"$TEST_TMP/zdr.err"
assert_eq "$?" 4 "ephemeral transcript of a zero-data-retention run (refused: 4xx)"
assert_contains "$(cat "$TEST_TMP/zdr.err")" "zero data retention" "its message"
[ ! -s "$TEST_TMP/zdr.jsonl" ] || fail "a transcript of a zero-data-retention run was written"
"$EPH" run --replay-of run_nothere --budget 0.1 2>"$TEST_TMP/usage.err"
assert_eq "$?" 2 "ephemeral run --replay-of with a bad id"
assert_contains "$(cat "$TEST_TMP/usage.err")" "--replay-of" "its message"

out=$(api GET "/v1/runs/$zdr/transcript")
assert_error "$out" 404 not_found_error
other=$(new_org other) || fail "second org"
out=$(as "$other" api GET "/v1/runs/$orig/transcript")
assert_error "$out" 404 not_found_error
assert_not_contains "$out" "record me" "another org sees the prompt"
assert_error "$(api GET /v1/runs/run_nothere/transcript)" 404 not_found_error

# ---- replay_of refused ----
replay_body() { # RUN [EXTRA JSON OBJECT]
    jq -nc --arg of "$1" --argjson extra "${2:-"{}"}" '{replay_of: $of, max_cost_micros: 100000} + $extra'
}
post() { api POST /v1/runs -H 'Content-Type: application/json' -d "$1"; }
assert_error "$(post '{"replay_of": 42, "max_cost_micros": 1000}')" 400 invalid_request_error replay_of
assert_error "$(post '{"replay_of": "run_x", "max_cost_micros": 1000}')" 400 invalid_request_error replay_of
assert_error "$(post "$(replay_body run_0123456789abcdef0123456789abcdef)")" 404 not_found_error replay_of
assert_error "$(as "$other" post "$(replay_body "$orig")")" 404 not_found_error replay_of
assert_error "$(post "$(replay_body "$zdr")")" 400 invalid_request_error replay_of
assert_error "$(post "$(replay_body "$slow")")" 400 invalid_request_error replay_of
assert_error "$(post "$(replay_body "$orig" '{"zero_data_retention": true}')")" 400 \
    invalid_request_error zero_data_retention
assert_error "$(post "$(replay_body "$orig" '{"model": "slow"}')")" 400 invalid_request_error model
assert_error "$(post "$(replay_body "$orig" '{"web": true}')")" 400 invalid_request_error web
assert_error "$(post "$(replay_body "$orig" '{"connections": ["gh"]}')")" 400 \
    invalid_request_error connections
# A run not finished yet has a transcript of what it has recorded so far.
out=$(api GET "/v1/runs/$slow/transcript")
assert_eq "${out##*HTTP }" 200 "the transcript of a running run"
st=$(head -n 1 <<<"$out" | jq -r .status)
[[ $st =~ ^(queued|starting|running)$ ]] || fail "the run line of a running run says '$st'"
api POST "/v1/runs/$slow/cancel" >/dev/null
# A run without a shell cannot be replayed with one.
noshell=$(run_create '{"prompt": "no shell", "model": "other", "shell": false, "max_cost_micros": 200000}')
run_wait "$noshell" >/dev/null
assert_error "$(post "$(replay_body "$noshell" '{"shell": true}')")" 400 invalid_request_error shell

# ---- the replay ----
if ! jq -se 'any(.[]; .kind == "model_turn")' "$TEST_TMP/orig.jsonl" >/dev/null; then
    skip "the agent does not record its model turns yet: replay itself not tested"
fi
before=$(fake_requests rec | jq length)
rep=$(run_create "$(replay_body "$orig")")
run=$(run_wait "$rep")
assert_eq "$(jq -r .status <<<"$run")" completed "replay ($(jq -c .error <<<"$run"))"
check_settled "$run"
assert_eq "$(fake_requests rec | jq length)" "$before" "no request reached the model"
assert_eq "$(jq .cost.model_micros <<<"$run")" 0 "model cost of a replay"
assert_eq "$(jq -r .result <<<"$run")" "recorded answer" "the recorded answer"
assert_eq "$(jq -c '[.replay.of, .permissions.shell, .permissions.web]' <<<"$run")" "[\"$orig\",true,false]" \
    "the replay object and the inherited permissions"
ev=$(run_events "$rep")
assert_eq "$(jq '[.data[] | select(.type == "model.call") | .data.replayed] | all' <<<"$ev")" true \
    "model.call events say replayed"
assert_contains "$(jq -r '.data[] | select(.type == "model.call") | .message' <<<"$ev")" "replayed" \
    "the timeline says replayed"
# The same commands ran.
cmds() { run_events "$1" | jq -c '[.data[] | select(.type == "shell.command") | .data.call.arguments]'; }
assert_eq "$(cmds "$rep")" "$(cmds "$orig")" "the same commands"
# The random bytes differ, the rest does not: exactly the first call diverged.
div=$(jq -c '[.data[] | select(.type == "replay.divergence") | .data]' <<<"$ev")
assert_eq "$(jq -c '[.[] | [.call_id, .tool, .turn]]' <<<"$div")" '[["r1","shell",1]]' "divergences"
assert_eq "$(jq -r .replay.divergences <<<"$run")" 1 "the run counts its divergences"
assert_contains "$(jq -r '.[0].original' <<<"$div")" "same-every-time" "the original result"
random_of() { jq -r --arg k "$1" '.[0][$k] | fromjson | .stdout | split("\n")[1]' <<<"$div"; }
[ -n "$(random_of replayed)" ] || fail "no random bytes in the replayed result"
[ "$(random_of original)" != "$(random_of replayed)" ] || fail "the random bytes did not differ"
assert_eq "$(jq -r '.data[] | select(.type == "replay.divergence") | .message' <<<"$ev")" \
    "divergence in shell (turn 1)" "the divergence's message"
api GET "/v1/runs/$rep/transcript" | sed '$d' >"$TEST_TMP/rep.jsonl"
assert_eq "$(jq -sc '[.[] | select(.kind == "divergence") | .call_id]' "$TEST_TMP/rep.jsonl")" '["r1"]' \
    "the divergence in the replay's transcript"
assert_eq "$(head -n 1 "$TEST_TMP/rep.jsonl" | jq -r .replay_of)" "$orig" "the transcript says what it replays"

# The CLI: a replay made with --replay-of, and `ephemeral replay` listing its divergences.
NO_COLOR=1 "$EPH" run --replay-of "$orig" --budget 0.1 --json >"$TEST_TMP/cli-rep.json" ||
    fail "ephemeral run --replay-of: $(cat "$TEST_TMP/cli-rep.json")"
assert_eq "$(jq -r .replay.of "$TEST_TMP/cli-rep.json")" "$orig" "ephemeral run --replay-of"
assert_eq "$(jq -r .cost.model_micros "$TEST_TMP/cli-rep.json")" 0 "its model cost"
out=$(NO_COLOR=1 "$EPH" replay "$rep") || fail "ephemeral replay"
assert_contains "$out" "Replay of $orig: 1 divergence" "ephemeral replay says what it replays"
assert_contains "$out" "divergence in shell (turn 1) · call r1" "and lists the divergence"
echo "ok"
