#!/bin/bash
# Live output (docs/AGENT.md, "Live output") through the real server, on every backend this host
# has: while a command runs, its output reaches the timeline as shell.output events, streamed over
# SSE before the command ends, past the head that the command's result keeps (the sandbox sends
# those bytes live), with contiguous offsets from 0 that rebuild the stream; at most
# sandbox.live_output_bytes of text per command; none at all under zero data retention, in the
# answer or in the store.
#
# The command prints a line, 20,000 bytes (more than the 8 KiB head of the default output cap), a
# marker, then sleeps: the test waits on the SSE stream for the marker, checks that the command
# has not ended (no shell.command event, the run running), and cancels the run.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agent_common.sh"
cd "$TOP"
[ -d "$EPHEMERAL_IMAGE" ] || skip "no sandbox image at $EPHEMERAL_IMAGE (make image)"

# The marker is made by printf ("past-the-%s" head), so that only the output holds it, never
# the command's own text (which the model.call event carries).
CMD='printf "first line\n"; head -c 20000 /dev/zero | tr "\\0" a; printf "\npast-the-%s\n" head; printf "to stderr\n" >&2; sleep 50'
script() {
    jq -nc --arg c "$CMD" '[{tool_calls: [{id: "live1", name: "shell",
        arguments: ({command: $c, timeout_seconds: 55} | tojson)}]}, {text: "done"}]'
}

# What this host can run (agent_common.sh, host_backends).
backends=$(host_backends)
export EPHEMERAL_MICROVM_ALLOW_TCG=1

# sse_until ID FILE NEEDLE: follows the run's events over SSE into FILE until NEEDLE is in it.
sse_until() {
    curl -sS -N --max-time 120 "$EPHEMERAL_URL/v1/runs/$1/events" \
        -H "Authorization: Bearer $EPHEMERAL_API_KEY" -H 'Accept: text/event-stream' >"$2" &
    local pid=$!
    _pids+=("$pid")
    for _ in $(seq 1200); do
        grep -q -- "$3" "$2" 2>/dev/null && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    fail "$3 never came over SSE: $(tail -c 2000 "$2")"
}

for b in $backends; do
    fake_start "lo_$b" "$(script)"
    EPHEMERAL_TEST_SANDBOX=$b agent_server "$(fake_model lo openai "lo_$b" | jq -s .)"
    id=$(run_create '{"prompt": "show me", "model": "lo", "max_cost_micros": 200000, "timeout_seconds": 120}')
    sse_until "$id" "$TEST_TMP/$b.sse" past-the-head
    # The marker came while the command still runs: its shell.command event is not there yet.
    assert_not_contains "$(cat "$TEST_TMP/$b.sse")" "event: shell.command" "$b: before the command ended"
    st=$(api GET "/v1/runs/$id" | head -n 1 | jq -r .status); [ "$st" = running ] || { run_events "$id" | jq -c ".data[] | [.type, .message]" >&2; fail "$b: the run is $st, not running"; }
    out=$(api POST "/v1/runs/$id/cancel" --max-time 30)
    assert_eq "${out##*HTTP }" 200 "$b: cancel"
    run=$(run_wait "$id")
    assert_eq "$(jq -r .status <<<"$run")" cancelled "$b: cancelled"
    ev=$(run_events "$id")
    live=$(jq -c '[.data[] | select(.type == "shell.output") | .data]' <<<"$ev")
    for s in stdout stderr; do
        # Contiguous from 0, each text where the last one ended.
        jq -e --arg s "$s" '[.[] | select(.stream == $s)] |
            reduce .[] as $e ({next: 0, ok: true};
                {next: ($e.offset + ($e.text | utf8bytelength)), ok: (.ok and $e.offset == .next)}) | .ok' \
            <<<"$live" >/dev/null || fail "$b: $s offsets not contiguous: $live"
        jq -e --arg s "$s" 'all(.[]; .call == "live1")' <<<"$live" >/dev/null || fail "$b: call id"
    done
    text=$(jq -r '[.[] | select(.stream == "stdout") | .text] | join("")' <<<"$live")
    want=$(printf 'first line\n%s\npast-the-head\n' "$(head -c 20000 /dev/zero | tr '\0' a)")
    assert_eq "$text" "$want" "$b: the stdout text rebuilt from its events"
    assert_eq "$(jq -r '[.[] | select(.stream == "stderr") | .text] | join("")' <<<"$live")" \
        "to stderr" "$b: stderr"
    # Coalesced: at most one event per 250 ms per stream or one per 8 KiB, not one per write.
    [ "$(jq length <<<"$live")" -le 12 ] || fail "$b: $(jq length <<<"$live") events: not coalesced"
    # Every shell.output of the call comes before its shell.command.
    jq -e '[.data[] | select(.type == "shell.output" or .type == "shell.command") | .type] |
        (index("shell.command") // length) >= (map(select(. == "shell.output")) | length)' \
        <<<"$ev" >/dev/null || fail "$b: a shell.output after the shell.command"
    check_settled "$run"
    stop_server
done

# The cap per command, and zero data retention (namespaces is enough: the rule is the server's).
fake_start lo_cap "$(script)"
SHORT='printf "first line\n"; head -c 20000 /dev/zero | tr "\\0" a; printf "\npast-the-%s\n" head'
fake_start lo_zdr "$(jq -nc --arg c "$SHORT" '[{tool_calls: [{id: "z1", name: "shell",
    arguments: ({command: $c} | tojson)}]}, {text: "done"}]')"
agent_server "$(jq -s . <(fake_model cap openai lo_cap) <(fake_model zdr openai lo_zdr))" '' \
    '{"sandbox": {"live_output_bytes": 100}}'
id=$(run_create '{"prompt": "show me", "model": "cap", "max_cost_micros": 200000, "timeout_seconds": 120}')
sse_until "$id" "$TEST_TMP/cap.sse" "event: shell.output"
# The cap is reached at once (20 KiB): wait for the stream to hold the capped total, then cancel.
for _ in $(seq 200); do
    n=$(api GET "/v1/runs/$id/events" | head -n 1 |
        jq '[.data[] | select(.type == "shell.output") | .data.text | utf8bytelength] | add // 0')
    [ "$n" -ge 100 ] && break
    sleep 0.05
done
api POST "/v1/runs/$id/cancel" --max-time 30 >/dev/null
run_wait "$id" >/dev/null
total=$(run_events "$id" | jq '[.data[] | select(.type == "shell.output") | .data.text | utf8bytelength] | add // 0')
assert_eq "$total" 100 "the live text is capped at live_output_bytes"

id=$(run_create '{"prompt": "show me", "model": "zdr", "max_cost_micros": 200000, "timeout_seconds": 120, "zero_data_retention": true}')
sse_until "$id" "$TEST_TMP/zdr.sse" "event: worker.destroyed"
run=$(run_wait "$id")
assert_eq "$(jq -r .status <<<"$run")" completed "ZDR: completed"
ev=$(run_events "$id")
# The command ran (its event is there) and printed, and none of it was shown.
assert_eq "$(jq '[.data[] | select(.type == "shell.command")] | length' <<<"$ev")" 1 "ZDR: the command ran"
assert_not_contains "$(cat "$TEST_TMP/zdr.sse")" "shell.output" "ZDR: none over SSE"
assert_eq "$(jq '[.data[] | select(.type == "shell.output")] | length' <<<"$ev")" 0 "ZDR: none in the timeline"
assert_eq "$(sqlite3 "$DB" "SELECT COUNT(*) FROM events WHERE run_id = '$id' AND type = 'shell.output'")" 0 \
    "ZDR: none in the store"
echo "live output ok on: $backends"
