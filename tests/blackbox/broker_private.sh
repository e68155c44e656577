#!/bin/bash
# Private ranges open only what they name (docs/BROKER.md), in a real sandbox through the real
# server, twice:
#   1. broker.allow_private_cidrs covers all of loopback, broker.web_private_cidrs is empty: a run
#      with web and a connection reaches the connection's loopback upstream through the
#      connection's path rules only; by web (plain HTTP, CONNECT, web_fetch) it reaches neither
#      that upstream nor the server's own API (/healthz, /metrics); a connection whose base_url is
#      the server's own API port is refused too.
#   2. broker.web_private_cidrs covers all of loopback, allow_private_cidrs is empty: web reaches
#      the loopback upstream (plain HTTP, CONNECT, web_fetch), never the server's own API port in
#      any spelling (127.0.0.1, localhost, 127.0.0.2, [::ffff:127.0.0.1], [::1]), nor by CONNECT,
#      nor through a redirect; the connection's upstream is refused to the connection.
# What reached the upstream is checked from its own log: only what was allowed. A list that is not
# one of CIDRs stops the server at start-up with a clear message.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agent_common.sh"
. "$(dirname "$0")/broker_common.sh"
cd "$TOP"

upstream_start site
U=$UP_PORT
A1=$(free_port)
A2=$(free_port)
P=http://127.0.0.1:3128
code() { echo "curl -s -o /dev/null -w '%{http_code} %{http_connect}\\n' $*"; }
fetch() { jq -nc --arg id "$1" --arg u "$2" '{id: $id, name: "web_fetch", arguments: ({url: $u} | tojson)}'; }

fake_start one "$(jq -nc \
    --argjson w1 "$(shell_call w1 "$(code http://127.0.0.1:$U/web-direct)")" \
    --argjson w2 "$(shell_call w2 "$(code -p http://127.0.0.1:$U/web-tunnel)")" \
    --argjson w3 "$(shell_call w3 "$(code http://127.0.0.1:$A1/healthz)")" \
    --argjson w4 "$(shell_call w4 "$(code http://127.0.0.1:$A1/metrics)")" \
    --argjson w5 "$(shell_call w5 "$(code -p http://127.0.0.1:$A1/healthz)")" \
    --argjson c1 "$(shell_call c1 "curl -sS $P/api/allowed/x")" \
    --argjson c2 "$(shell_call c2 "curl -sS $P/api/other")" \
    --argjson c3 "$(shell_call c3 "curl -sS $P/self/healthz")" \
    --argjson f1 "$(fetch f1 "http://127.0.0.1:$U/html")" \
    --argjson f2 "$(fetch f2 "http://127.0.0.1:$A1/healthz")" \
    '[{tool_calls: [$w1, $w2, $w3, $w4, $w5, $c1, $c2, $c3, $f1, $f2]}, {text: "done"}]')"
fake_start two "$(jq -nc \
    --argjson w1 "$(shell_call w1 "curl -sS http://127.0.0.1:$U/web-open")" \
    --argjson w2 "$(shell_call w2 "curl -sS -p http://127.0.0.1:$U/web-open-tunnel")" \
    --argjson w3 "$(shell_call w3 "$(code http://127.0.0.1:$A2/healthz)")" \
    --argjson w4 "$(shell_call w4 "$(code http://127.0.0.1:$A2/metrics)")" \
    --argjson w5 "$(shell_call w5 "$(code http://localhost:$A2/healthz)")" \
    --argjson w6 "$(shell_call w6 "$(code http://127.0.0.2:$A2/metrics)")" \
    --argjson w7 "$(shell_call w7 "$(code "http://[::ffff:127.0.0.1]:$A2/healthz")")" \
    --argjson w8 "$(shell_call w8 "$(code "http://[::1]:$A2/healthz")")" \
    --argjson w9 "$(shell_call w9 "$(code -p http://127.0.0.1:$A2/healthz)")" \
    --argjson w10 "$(shell_call w10 "$(code -p http://localhost:$A2/metrics)")" \
    --argjson c1 "$(shell_call c1 "curl -sS $P/api/allowed/y")" \
    --argjson f1 "$(fetch f1 "http://127.0.0.1:$U/html")" \
    --argjson f2 "$(fetch f2 "http://127.0.0.1:$A2/metrics")" \
    --argjson f3 "$(fetch f3 "http://127.0.0.1:$U/redirect?to=http://localhost:$A2/healthz")" \
    '[{tool_calls: [$w1, $w2, $w3, $w4, $w5, $w6, $w7, $w8, $w9, $w10, $c1, $f1, $f2, $f3]}, {text: "done"}]')"
models=$(jq -s . <(fake_model one openai one) <(fake_model two openai two))

# serve_with PORT BROKER_JSON: (re)starts the server on 127.0.0.1:PORT with that broker block,
# the same database and key each time.
DB=$TEST_TMP/ephemeral.db
SERVER_LOG=$TEST_TMP/server.log
serve_with() {
    if [ -n "${SERVER_PID:-}" ]; then
        kill -TERM "$SERVER_PID"
        wait "$SERVER_PID" 2>/dev/null
    fi
    jq -n --argjson models "$models" --argjson broker "$2" --arg key "$TEST_TMP/secret.key" \
        '{default_model: $models[0].id, models: $models, broker: $broker, secret_key_file: $key}' \
        >"$TEST_TMP/config.json" || fail "config"
    export EPHEMERAL_URL="http://127.0.0.1:$1"
    "$EPHD" serve --listen "127.0.0.1:$1" --db "$DB" --config "$TEST_TMP/config.json" \
        ${EPHEMERAL_TEST_SANDBOX:+--sandbox "$EPHEMERAL_TEST_SANDBOX"} >>"$SERVER_LOG" 2>&1 &
    SERVER_PID=$!
    _pids+=("$SERVER_PID")
    for _ in $(seq 600); do
        curl -fsS "$EPHEMERAL_URL/healthz" >/dev/null 2>&1 && return 0
        kill -0 "$SERVER_PID" 2>/dev/null || { tail -n 20 "$SERVER_LOG" >&2; fail "server exited"; }
        sleep 0.05
    done
    fail "server did not become healthy"
}
# A list that is not one of CIDRs is refused at start-up, with the key and the entry named.
bad_config() { # BROKER_JSON EXPECTED_MESSAGE
    jq -n --argjson broker "$1" '{broker: $broker}' >"$TEST_TMP/bad.json"
    if "$EPHD" serve --config "$TEST_TMP/bad.json" --listen "127.0.0.1:$(free_port)" \
        --db "$TEST_TMP/bad.db" >"$TEST_TMP/bad.log" 2>&1; then
        fail "broker $1 was accepted"
    fi
    assert_contains "$(cat "$TEST_TMP/bad.log")" "$2" "broker $1"
}
bad_config '{"web_private_cidrs": ["127.0.0.1/33"]}' "broker.web_private_cidrs[0] is not a CIDR"
bad_config '{"web_private_cidrs": ["127.0.0.0/8", "10.0.0.1/8"]}' "broker.web_private_cidrs[1] is not a CIDR"
bad_config '{"web_private_cidrs": ["localhost"]}' "broker.web_private_cidrs[0] is not a CIDR"
bad_config '{"web_private_cidrs": "127.0.0.1/32"}' "'broker.web_private_cidrs' must be an array of at most 64 CIDRs"
bad_config "{\"web_private_cidrs\": $(jq -nc '[range(65) | "127.0.0.\(.)/32"]')}" \
    "'broker.web_private_cidrs' must be an array of at most 64 CIDRs"
bad_config '{"allow_private_cidrs": [1]}' "broker.allow_private_cidrs[0] is not a CIDR"

EPHEMERAL_API_KEY=$("$EPHD" admin init --db "$DB") || fail "admin init failed"
export EPHEMERAL_API_KEY
SERVER_PID=

# 1. Connections opened, web not.
serve_with "$A1" '{"allow_private_cidrs": ["127.0.0.0/8", "::1/128"]}'
for c in "api http://127.0.0.1:$U [\"/allowed\"]" "self http://127.0.0.1:$A1 []"; do
    set -- $c
    out=$(api POST /v1/connections -H 'Content-Type: application/json' -d "$(jq -nc --arg n "$1" \
        --arg url "$2" --argjson p "$3" '{name: $n, base_url: $url, methods: ["GET"],
        path_prefixes: $p, headers: {"Authorization": "Bearer private-ranges-test"}}')")
    assert_eq "${out##*HTTP }" 201 "create connection $1: $out"
done
id=$(run_create '{"prompt": "connections only", "model": "one", "max_cost_micros": 500000,
    "web": true, "connections": ["api", "self"]}')
run=$(run_wait "$id" 120)
assert_eq "$(jq -r .status <<<"$run")" completed "run 1 status ($(jq -c .error <<<"$run"))"
res() { tool_result "$1" 1 "$2" | jq -r .stdout; }
assert_eq "$(res one w1)" "403 000" "web cannot reach the connection's upstream"
assert_eq "$(res one w2)" "000 403" "nor tunnel to it"
assert_eq "$(res one w3)" "403 000" "web to the API's /healthz"
assert_eq "$(res one w4)" "403 000" "web to the API's /metrics"
assert_eq "$(res one w5)" "000 403" "CONNECT to the API"
assert_contains "$(res one c1)" "GET /allowed/x auth=[" "the connection, inside its rules"
assert_not_contains "$(res one c1)" "private-ranges-test" "its credential"
assert_eq "$(res one c2 | jq -r .error.code)" path_not_allowed "the connection, outside its rules"
c3=$(res one c3)
assert_eq "$(jq -r .error.code <<<"$c3")" address_not_allowed "a connection to the server's own port"
assert_contains "$(jq -r .error.message <<<"$c3")" "server's own" "its reason"
assert_contains "$(tool_result one 1 f1 | jq -r .error)" "is not a public address (loopback)" "web_fetch of the upstream"
assert_contains "$(tool_result one 1 f2 | jq -r .error)" "is not a public address (loopback)" "web_fetch of the API"
assert_eq "$(upstream_requests site | jq -r '[.[].path] | join(" ")')" "/allowed/x" \
    "only the connection's allowed request reached the upstream"
ev=$(run_events "$id")
assert_eq "$(jq '[.data[] | select(.type == "web.request" and .data.denied == "address_not_allowed")] | length' <<<"$ev")" 7 \
    "web refusals recorded (5 requests, 2 web_fetch)"

# 2. Web opened, connections not: the server's own port stays closed.
serve_with "$A2" '{"web_private_cidrs": ["127.0.0.0/8", "::1/128"]}'
id=$(run_create '{"prompt": "web only", "model": "two", "max_cost_micros": 500000,
    "web": true, "connections": ["api"]}')
run=$(run_wait "$id" 120)
assert_eq "$(jq -r .status <<<"$run")" completed "run 2 status ($(jq -c .error <<<"$run"))"
assert_eq "$(res two w1)" "GET /web-open auth=[] body=[]" "web reaches an opened loopback upstream"
assert_eq "$(res two w2)" "GET /web-open-tunnel auth=[] body=[]" "and tunnels to it"
for c in w3 w4 w5 w6 w7 w8; do
    assert_eq "$(res two $c)" "403 000" "web to the API port ($c)"
done
assert_eq "$(res two w9)" "000 403" "CONNECT to the API port"
assert_eq "$(res two w10)" "000 403" "CONNECT to the API port by name"
c1=$(res two c1)
assert_eq "$(jq -r .error.code <<<"$c1")" address_not_allowed "web_private_cidrs does not open connections"
assert_contains "$(jq -r .error.message <<<"$c1")" "not public" "its reason"
assert_eq "$(tool_result two 1 f1 | jq -r .status)" 200 "web_fetch of the opened upstream"
assert_contains "$(tool_result two 1 f2 | jq -r .error)" "127.0.0.1:$A2 is the server's own address" "web_fetch of /metrics"
assert_contains "$(tool_result two 1 f3 | jq -r .error)" "localhost:$A2 is the server's own address" "a redirect to the API"
assert_eq "$(upstream_requests site | jq -r '[.[].path] | join(" ")')" \
    "/allowed/x /web-open /web-open-tunnel /html /redirect?to=http://localhost:$A2/healthz" \
    "what reached the upstream"
ev=$(run_events "$id")
assert_eq "$(jq '[.data[] | select(.type == "web.request" and .data.denied == "address_not_allowed")] | length' <<<"$ev")" 10 \
    "refusals recorded (8 requests, 2 web_fetch hops)"
assert_eq "$(jq '[.data[] | select(.type == "connection.request" and .data.denied == "address_not_allowed")] | length' <<<"$ev")" 1 \
    "the connection's refusal recorded"
echo ok
