#!/bin/bash
# Events are stored as the text the API serves (docs/API.md): the JSON list and the SSE stream write
# each event's stored text out as is, byte for byte; every event, the first (run.queued) and the
# closing ones included, is stored with it, and what is served is that text, not the fields made
# again; an event's data is kept once, in that text. A row without it (written before the text was
# stored, its data in its own column) is served the same, byte for byte.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/api_common.sh"
test_deadline 120
have_image || skip "no sandbox image (make image)"
start_api_server

id=$(new_run "$TICKER_PROMPT" 30000)
wait_until "the run to settle" 600 run_status_is "$id" completed
q() { sqlite3 -cmd '.timeout 5000' "$DB" "$1"; }
assert_eq "$(q "SELECT COUNT(*) FROM events WHERE run_id = '$id' AND wire IS NULL")" 0 \
    "every event stored with its text"
q "SELECT wire FROM events WHERE run_id = '$id' ORDER BY seq" >"$TEST_TMP/stored.txt"
[ "$(wc -l <"$TEST_TMP/stored.txt")" -ge 5 ] || fail "too few events stored"

get_list() { # FILE: the JSON list's body, as received
    curl -sS -o "$1" "$EPHEMERAL_URL/v1/runs/$id/events" \
        -H "Authorization: Bearer $EPHEMERAL_API_KEY" || fail "GET events"
}
get_list "$TEST_TMP/list.json"
{
    printf '{"object":"list","data":['
    paste -sd, "$TEST_TMP/stored.txt" | tr -d '\n'
    printf ']}\n'
} >"$TEST_TMP/expect.json"
cmp "$TEST_TMP/list.json" "$TEST_TMP/expect.json" || fail "the list is not the stored text"
jq -e '.data | length > 0' "$TEST_TMP/list.json" >/dev/null || fail "the list is not JSON"

curl -sS -N --max-time 60 "$EPHEMERAL_URL/v1/runs/$id/events" \
    -H "Authorization: Bearer $EPHEMERAL_API_KEY" -H 'Accept: text/event-stream' \
    >"$TEST_TMP/events.sse" || fail "the stream"
grep '^data: ' "$TEST_TMP/events.sse" | sed 's/^data: //' >"$TEST_TMP/streamed.txt"
cmp "$TEST_TMP/streamed.txt" "$TEST_TMP/stored.txt" || fail "the stream is not the stored text"

# The data of an event stored with its text is in that text, not stored a second time.
assert_eq "$(q "SELECT COUNT(*) FROM events WHERE run_id = '$id' AND data != '{}'")" 0 \
    "event data stored once, in the text"
q "CREATE TABLE kept AS SELECT seq, wire FROM events WHERE run_id = '$id'"

# What is served is what is stored, not made again from the fields: a stored text changed behind
# the server's back is what both forms serve.
q "UPDATE events SET wire = '{\"seq\":2,\"marker\":\"as stored\"}' WHERE run_id = '$id' AND seq = 2"
get_list "$TEST_TMP/marked.json"
assert_eq "$(jq -c '.data[1]' "$TEST_TMP/marked.json")" '{"seq":2,"marker":"as stored"}' "list: stored text"
curl -sS -N --max-time 60 "$EPHEMERAL_URL/v1/runs/$id/events" \
    -H "Authorization: Bearer $EPHEMERAL_API_KEY" -H 'Accept: text/event-stream' \
    -H 'Last-Event-ID: 1' >"$TEST_TMP/marked.sse" || fail "the stream"
assert_eq "$(grep -m1 '^data: ' "$TEST_TMP/marked.sse")" 'data: {"seq":2,"marker":"as stored"}' \
    "stream: stored text"

# Rows from before the column (their data in its own column, no text): served in the same form,
# made on read.
q "UPDATE events SET data = (SELECT json_extract(k.wire, '\$.data') FROM kept k WHERE k.seq = events.seq),
   wire = NULL WHERE run_id = '$id'"
get_list "$TEST_TMP/old.json"
cmp "$TEST_TMP/old.json" "$TEST_TMP/list.json" || fail "a row without its text is served otherwise"
echo "run $id: $(wc -l <"$TEST_TMP/stored.txt") events served as stored"
