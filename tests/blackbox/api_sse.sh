#!/bin/bash
# Events (docs/API.md): GET /v1/runs/{id}/events as JSON and as Server-Sent Events: past events
# first, then live ones, `id:` = seq, resumable with Last-Event-ID (only later events), comment
# keep-alives when idle (every sse_keepalive_seconds: 1 s here), the stream closed after the
# final event; Prefer: wait long polls; and 100 concurrent streams do not take a thread each
# (the server parks idle streams).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/api_common.sh"
test_deadline 120
have_image || skip "no sandbox image (make image)"
start_api_server '"sse_keepalive_seconds": 1, "max_concurrent_runs": 2'

sse() { # PATH [curl args]: the stream, to stdout, until the server closes it
    local p=$1
    shift
    curl -sS -N --max-time 60 "$EPHEMERAL_URL$p" -H "Authorization: Bearer $EPHEMERAL_API_KEY" \
        -H 'Accept: text/event-stream' "$@"
}
ids_of() { grep '^id: ' "$1" | sed 's/^id: //' | tr '\n' ' '; }

# Past then live: join the ticker run once it has some events, read until the server closes.
id=$(new_run "$TICKER_PROMPT" 30000)
wait_until "a first command" 400 run_has_event "$id" shell.command
past=$(api GET "/v1/runs/$id/events" | sed '$d' | jq '.data | length')
sse "/v1/runs/$id/events" >"$TEST_TMP/live.sse" &
curl_pid=$!
_pids+=("$curl_pid")
wait_until "the stream to end by itself" 600 bash -c "! kill -0 $curl_pid 2>/dev/null"
wait "$curl_pid" || fail "curl failed on the stream (exit $?)"
final=$(api GET "/v1/runs/$id/events" | sed '$d')
total=$(jq '.data | length' <<<"$final")
[ "$total" -gt "$past" ] || fail "no live events after the $past past ones"
expect=$(seq -s ' ' 1 "$total")
assert_eq "$(ids_of "$TEST_TMP/live.sse")" "$expect " "ids on the stream"
# Each message: id, event = type, data = the event's JSON, the same as the JSON list.
streamed=$(grep '^data: ' "$TEST_TMP/live.sse" | sed 's/^data: //' | jq -cs .)
assert_eq "$streamed" "$(jq -c .data <<<"$final")" "streamed events = stored events"
assert_eq "$(grep '^event: ' "$TEST_TMP/live.sse" | sed 's/^event: //' | tr '\n' ' ')" \
    "$(jq -r '[.data[].type] | join(" ")' <<<"$final") " "event names"
assert_eq "$(grep '^event: ' "$TEST_TMP/live.sse" | tail -n 1)" "event: worker.destroyed" "last event"
assert_eq "$(run_field "$id" .status)" completed "ticker run"
assert_eq "$(run_field "$id" .result)" "one two three" "ticker result"

# Resume: only the events after Last-Event-ID (and after= for the JSON form).
sse "/v1/runs/$id/events" -H 'Last-Event-ID: 3' >"$TEST_TMP/resume.sse" || fail "resume stream"
assert_eq "$(ids_of "$TEST_TMP/resume.sse")" "$(seq -s ' ' 4 "$total") " "ids after 3"
sse "/v1/runs/$id/events" -H "Last-Event-ID: $total" >"$TEST_TMP/none.sse" || fail "resume at the end"
assert_eq "$(grep -c '^id: ' "$TEST_TMP/none.sse")" 0 "nothing after the last event"
assert_eq "$(api GET "/v1/runs/$id/events?after=3" | sed '$d' | jq -c '[.data[].seq]')" \
    "$(seq -s , 4 "$total" | sed 's/^/[/; s/$/]/')" "JSON after=3"
assert_error "$(api GET "/v1/runs/$id/events" -H 'Accept: text/event-stream' -H 'Last-Event-ID: x')" \
    400 invalid_request_error Last-Event-ID

# Keep-alives: an idle stream (a run blocked in its command) gets comment lines.
slow=$(new_run "$SLOW_PROMPT" 40000)
wait_command_running "$slow"
curl -sS -N --max-time 3.5 "$EPHEMERAL_URL/v1/runs/$slow/events" \
    -H "Authorization: Bearer $EPHEMERAL_API_KEY" -H 'Accept: text/event-stream' \
    >"$TEST_TMP/idle.sse" 2>/dev/null
n=$(grep -c '^: keep-alive$' "$TEST_TMP/idle.sse")
[ "$n" -ge 2 ] || fail "keep-alives in 3.5 s at 1 s: $n"

# Many streams, few threads: 100 streams on the blocked run park instead of holding threads.
threads_before=$(awk '/^Threads:/ {print $2}' "/proc/$SERVER_PID/status")
stream_pids=()
for i in $(seq 100); do
    sse "/v1/runs/$slow/events" >"$TEST_TMP/many.$i" 2>&1 &
    stream_pids+=("$!")
    _pids+=("$!")
done
parked() {
    [ "$(curl -s "$EPHEMERAL_URL/metrics" | awk '$1 == "ephemeral_http_parked_requests" {print $2}')" -ge 100 ]
}
wait_until "100 parked streams" 600 parked
threads=$(awk '/^Threads:/ {print $2}' "/proc/$SERVER_PID/status")
echo "threads: $threads_before before, $threads with 100 open streams"
[ "$threads" -le $((threads_before + 2)) ] || fail "streams took threads: $threads_before -> $threads"
# Other requests are served meanwhile.
assert_eq "$(code_of "$(api GET /v1/balance)")" 200 "balance while 100 streams wait"
# A long poll parks too, and wakes when the run settles: cancel it from the side.
api GET "/v1/runs/$slow" -H 'Prefer: wait=30' >"$TEST_TMP/poll" &
poll_pid=$!
_pids+=("$poll_pid")
wait_until "the long poll to park" 200 bash -c "[ \$(curl -s '$EPHEMERAL_URL/metrics' | awk '\$1 == \"ephemeral_http_parked_requests\" {print \$2}') -ge 101 ]"
api POST "/v1/runs/$slow/cancel" >/dev/null
wait "$poll_pid"
assert_eq "$(sed '$d' "$TEST_TMP/poll" | jq -r .status)" cancelled "long poll answer"
# Every stream ends by itself after the final event.
for p in "${stream_pids[@]}"; do
    wait_until "stream $p to end" 200 bash -c "! kill -0 $p 2>/dev/null"
done
for i in $(seq 100); do
    assert_eq "$(grep '^event: ' "$TEST_TMP/many.$i" | tail -n 1)" "event: worker.destroyed" "stream $i's last event"
done
assert_eq "$(curl -s "$EPHEMERAL_URL/metrics" | awk '$1 == "ephemeral_http_parked_requests" {print $2}')" 0 "nothing parked at the end"

# Prefer: wait on create: the answer comes when the run is done.
out=$(create_run "$QUICK_PROMPT" 20000 -H 'Prefer: wait=30')
assert_eq "$(code_of "$out")" 201 "create with wait"
assert_eq "$(body_of "$out" | jq -r .status)" completed "create with wait: terminal"
echo "sse: ok"
