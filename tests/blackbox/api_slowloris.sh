#!/bin/bash
# The HTTP server under a flood of connections that never finish their request head (docs/API.md,
# "Connections"; docs/SECURITY.md): one address holds at most http.max_connections_per_address
# of them and the server at most http.max_connections, a new connection taking the place of the
# oldest one still reading, so that /healthz and an authenticated GET are answered from the
# flooding address and from another; a connection that has not sent its whole head within
# http.request_head_seconds is closed, while an event stream and a long poll that wait longer are
# not; failed keys are limited per address (429, Retry-After), a good key from that address too,
# a key from another address not. Bounded: under 200 connections, each wait capped.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/api_common.sh"
have_image || skip "no sandbox image (make image)"
test_deadline 240
SL="python3 $TOP/tests/blackbox/slowloris.py"
ip addr show lo | grep -q 'inet 127.0.0.1/8' || skip "loopback is not 127.0.0.0/8 here"

# 0. A limit of 0 would refuse every connection: refused at start, saying which keys.
for k in max_connections max_connections_per_address request_head_seconds; do
    printf '{"http": {"%s": 0}}' "$k" >"$TEST_TMP/zero.json"
    if "$EPHD" serve --config "$TEST_TMP/zero.json" --listen "127.0.0.1:$(free_port)" \
        --db "$TEST_TMP/zero.db" >"$TEST_TMP/zero.log" 2>&1; then
        fail "http.$k 0 was accepted"
    fi
    assert_contains "$(cat "$TEST_TMP/zero.log")" "must be at least 1" "http.$k 0"
done

# 1. Places: 16 per address, 48 for the server; no deadline in the way (an hour).
start_api_server '"http": {"max_connections": 48, "max_connections_per_address": 16,
    "request_head_seconds": 3600, "auth_failures_per_minute": 5}'
port=${EPHEMERAL_URL##*:}
out=$($SL flood "$port" 127.0.0.1:60,127.0.0.3:16,127.0.0.4:16 127.0.0.2,127.0.0.1 16) ||
    fail "flood client: $out"
echo "flood: $out"
for src in 127.0.0.1 127.0.0.3 127.0.0.4; do
    n=$(jq --arg s "$src" '.open[$s]' <<<"$out")
    [ "$n" -le 16 ] || fail "$src holds $n connections that never sent a head (limit 16)"
done
total=$(jq '[.open[]] | add' <<<"$out")
[ "$total" -le 48 ] || fail "the flood holds $total connections (limit 48)"
for src in 127.0.0.2 127.0.0.1; do
    assert_eq "$(jq -c --arg s "$src" '.probes[$s]' <<<"$out")" "[200,200]" \
        "/healthz and GET /v1/balance from $src under the flood"
done
kill -0 "$SERVER_PID" || fail "the server died under the flood"

# 2. Failed keys: 5 a minute per address, then 429 for every key from it, good ones too.
bad="eph_$(head -c 300 /dev/urandom | tr -dc 'A-Za-z0-9' | head -c 40)"
from() { # SRC KEY: GET /v1/balance from SRC with KEY; api's output, headers first
    curl -sS --interface "$1" -D "$TEST_TMP/headers" "$EPHEMERAL_URL/v1/balance" \
        -H "Authorization: Bearer $2" -w '\nHTTP %{http_code}\n'
}
for i in 1 2 3 4 5; do
    assert_error "$(from 127.0.0.5 "$bad")" 401 authentication_error
done
out=$(from 127.0.0.5 "$bad")
assert_error "$out" 429 rate_limit_error
assert_eq "$(body_of "$out" | jq -r .error.code)" too_many_failed_authentications "code"
retry=$(tr -d '\r' <"$TEST_TMP/headers" | awk -F': ' 'tolower($1) == "retry-after" {print $2}')
[[ $retry =~ ^[0-9]+$ ]] && [ "$retry" -ge 1 ] || fail "Retry-After of the 429: '$retry'"
# One failure refills in 60/5 = 12 s: the wait says so (never less than what is missing).
[ "$retry" -le 12 ] || fail "Retry-After $retry for a bucket that refills one in 12 s"
assert_error "$(from 127.0.0.5 "$EPHEMERAL_API_KEY")" 429 rate_limit_error
assert_eq "$(code_of "$(from 127.0.0.6 "$EPHEMERAL_API_KEY")")" 200 "a good key from another address"
assert_error "$(from 127.0.0.6 "$bad")" 401 authentication_error
assert_eq "$(curl -s -o /dev/null --interface 127.0.0.5 -w '%{http_code}' "$EPHEMERAL_URL/healthz")" \
    200 "/healthz needs no key and is not limited"
# A missing key is not a failed one (a page that has no key yet).
for i in 1 2 3 4 5 6; do
    out=$(curl -sS --interface 127.0.0.7 -w '\nHTTP %{http_code}\n' "$EPHEMERAL_URL/v1/balance")
    assert_error "$out" 401 authentication_error
done
assert_eq "$(code_of "$(from 127.0.0.7 "$EPHEMERAL_API_KEY")")" 200 "good key after missing ones"

# 3. The deadline: 2 s to send a head; an event stream and a long poll are not cut by it.
kill -TERM "$SERVER_PID"
wait "$SERVER_PID"
mkdir "$TEST_TMP/second"
TEST_TMP_SAVED=$TEST_TMP
TEST_TMP=$TEST_TMP/second
start_api_server '"sse_keepalive_seconds": 1, "http": {"request_head_seconds": 2}'
TEST_TMP=$TEST_TMP_SAVED
port=${EPHEMERAL_URL##*:}
slow=$(new_run "$SLOW_PROMPT" 40000)
wait_command_running "$slow"
curl -sS -N --max-time 6 "$EPHEMERAL_URL/v1/runs/$slow/events" \
    -H "Authorization: Bearer $EPHEMERAL_API_KEY" -H 'Accept: text/event-stream' \
    >"$TEST_TMP/stream.sse" 2>/dev/null &
sse_pid=$!
_pids+=("$sse_pid")
api GET "/v1/runs/$slow" -H 'Prefer: wait=5' >"$TEST_TMP/poll.out" 2>&1 &
poll_pid=$!
_pids+=("$poll_pid")
closed=$($SL deadline "$port" 127.0.0.2 8) || fail "deadline client"
assert_eq "$closed" 8 "connections closed after the head deadline"
wait "$sse_pid"
sse_rc=$?
# 28: curl's own --max-time ended it; the server kept the stream open past the deadline.
assert_eq "$sse_rc" 28 "the event stream's end (curl status)"
n=$(grep -c '^: keep-alive$' "$TEST_TMP/stream.sse")
[ "$n" -ge 3 ] || fail "keep-alives on a 6 s stream at 1 s: $n"
wait "$poll_pid"
poll=$(cat "$TEST_TMP/poll.out")
assert_eq "$(code_of "$poll")" 200 "the long poll's answer"
assert_eq "$(body_of "$poll" | jq -r .status)" running "the long poll's run"
kill -0 "$SERVER_PID" || fail "the server died"
echo "flood bounded per address and per server, head deadline kept, failed keys limited"
