#!/bin/bash
# Zero data retention (SPEC 10): unique canaries in the prompt, in a command's output and in the
# model's answer never reach the database files (WAL included) or the logs, while the client that
# waited on the run receives the result; the run's events are kept, redacted to their type.
. "$(dirname "$0")/lib.sh"
[ -e "${EPHEMERAL_IMAGE:-$TOP/var/images/default}/bin/sh" ] || skip "no sandbox image (make image)"
cd "$TOP"
cat >"$TEST_TMP/config.json" <<JSON
{"default_model": "replay", "log_level": "debug",
 "models": [{"id": "replay", "provider": "replay", "transcripts": "$TOP/tests/fixtures/zdr",
             "input_micros_per_mtok": 50000, "output_micros_per_mtok": 200000}]}
JSON
start_server --config "$TEST_TMP/config.json"
prompt=$(jq -r .prompt tests/fixtures/zdr/canary/request.json)
canary_prompt=zdr-prompt-c4n4ry-5e1f
canary_output=zdr-output-c4n4ry-77ab
canary_answer=zdr-answer-c4n4ry-9d2e
assert_contains "$prompt" "$canary_prompt" "fixture prompt"

out=$(api POST /v1/runs -H 'Content-Type: application/json' -H 'Prefer: wait=60' \
    -d "$(jq -n --arg p "$prompt" '{prompt: $p, max_cost_micros: 40000, zero_data_retention: true}')")
assert_eq "${out##*HTTP }" 201 "create"
run=$(head -n 1 <<<"$out")
id=$(jq -r .id <<<"$run")
assert_eq "$(jq -r .status <<<"$run")" completed "status ($(jq -c .error <<<"$run"))"
# The waiting client got the result, with the real output in it.
assert_contains "$(jq -r .result <<<"$run")" "$canary_output" "result delivered (output)"
assert_contains "$(jq -r .result <<<"$run")" "$canary_answer" "result delivered (answer)"
assert_eq "$(jq -r .permissions.zero_data_retention <<<"$run")" true "flag"

# Afterwards the result is gone; the timeline remains, redacted.
again=$(api GET "/v1/runs/$id" | head -n 1)
assert_eq "$(jq -r .result <<<"$again")" null "result after delivery"
assert_eq "$(jq -r .status <<<"$again")" completed "status kept"
assert_eq "$(jq .usage.shell_commands <<<"$again")" 1 "usage kept"
events=$(api GET "/v1/runs/$id/events" | head -n 1)
assert_eq "$(jq -r '.data[] | select(.type=="shell.command") | .message' <<<"$events")" \
    shell.command "shell event redacted to its type"
assert_eq "$(jq '.data[] | select(.type=="shell.command") | .data | has("stdout") or has("stderr")' <<<"$events")" \
    false "no outputs in events"

# A client following the event stream gets the result once, as an unnumbered event just before
# the final one. (The command sleeps two seconds, so the stream is open before the run ends.)
out=$(api POST /v1/runs -H 'Content-Type: application/json' \
    -d "$(jq -n --arg p "$prompt" '{prompt: $p, max_cost_micros: 40000, zero_data_retention: true}')")
id2=$(head -n 1 <<<"$out" | jq -r .id)
stream=$(curl -sS -N --max-time 60 "$EPHEMERAL_URL/v1/runs/$id2/events" \
    -H "Authorization: Bearer $EPHEMERAL_API_KEY" -H 'Accept: text/event-stream')
assert_contains "$stream" "event: result" "result event on the stream"
result_line=$(grep -n '^event: result' <<<"$stream" | cut -d: -f1)
final_line=$(grep -n '^event: worker.destroyed' <<<"$stream" | cut -d: -f1)
[ -n "$result_line" ] && [ -n "$final_line" ] && [ "$result_line" -lt "$final_line" ] ||
    fail "the result event must come just before worker.destroyed"
assert_contains "$(grep -A1 '^event: result' <<<"$stream")" "$canary_answer" "result on the stream"
# The client prints it, though the server keeps it nowhere.
cli_out=$("$EPH" run --prompt "$prompt" --zdr --max-cost-micros 40000 2>&1) || fail "ephemeral run --zdr: $cli_out"
assert_contains "$cli_out" "$canary_answer" "result printed by the client"

# Stop the server so everything it would write is written, then search every file it wrote.
kill -TERM "$SERVER_PID"
wait "$SERVER_PID"
for f in "$DB" "$DB-wal" "$DB-shm" "$SERVER_LOG"; do
    [ -e "$f" ] || continue
    for c in "$canary_prompt" "$canary_output" "$canary_answer"; do
        if grep -a -q "$c" "$f"; then fail "canary $c found in $(basename "$f")"; fi
    done
done
# Control: the same run without zero data retention does store them, and the same search finds
# them, so the misses above are not a blind search.
port=${EPHEMERAL_URL##*:}
"$EPHD" serve --listen "127.0.0.1:$port" --db "$DB" --config "$TEST_TMP/config.json" \
    >>"$TEST_TMP/control.log" 2>&1 &
SERVER_PID=$!
_pids+=("$SERVER_PID")
for _ in $(seq 300); do curl -fsS "$EPHEMERAL_URL/healthz" >/dev/null 2>&1 && break; sleep 0.05; done
out=$(api POST /v1/runs -H 'Content-Type: application/json' -H 'Prefer: wait=60' \
    -d "$(jq -n --arg p "$prompt" '{prompt: $p, max_cost_micros: 40000}')")
assert_eq "$(head -n 1 <<<"$out" | jq -r .status)" completed "control run"
kill -TERM "$SERVER_PID"
wait "$SERVER_PID"
for c in "$canary_prompt" "$canary_output" "$canary_answer"; do
    cat "$DB" "$DB-wal" 2>/dev/null | grep -a -q "$c" || fail "control: canary $c not found: the search is blind"
done
echo "no canary in $(ls "$TEST_TMP" | tr '\n' ' ')"
