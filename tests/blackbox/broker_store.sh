#!/bin/bash
# The store's server is never reachable through the broker (docs/BROKER.md, "The server's own
# sockets"): the server runs on a PostgreSQL 15 of this test (loopback), with
# broker.web_private_cidrs and broker.allow_private_cidrs both covering all of loopback. A run
# with web and a connection whose base_url is the PostgreSQL port is refused at that port by
# plain HTTP, CONNECT (by address and by name), web_fetch and the connection, while a loopback
# upstream at another port is reached: the refusal is the store's address and port, not the range.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agent_common.sh"
. "$(dirname "$0")/broker_common.sh"
. "$(dirname "$0")/pg_common.sh"
cd "$TOP"
pg_start
export EPH_TEST_PG=$PG_URL

upstream_start site
U=$UP_PORT
code() { echo "curl -s -o /dev/null -w '%{http_code} %{http_connect}\\n' $*"; }
fake_start pg "$(jq -nc \
    --argjson s1 "$(shell_call s1 "$(code http://127.0.0.1:$PG_PORT/)")" \
    --argjson s2 "$(shell_call s2 "$(code -p http://127.0.0.1:$PG_PORT/)")" \
    --argjson s3 "$(shell_call s3 "$(code -p http://localhost:$PG_PORT/)")" \
    --argjson s4 "$(shell_call s4 "$(code -p http://127.0.0.1:$U/control)")" \
    --argjson c1 "$(shell_call c1 "curl -sS http://127.0.0.1:3128/pg/x")" \
    --argjson f1 "$(jq -nc --arg u "http://127.0.0.1:$PG_PORT/" '{id: "f1", name: "web_fetch", arguments: ({url: $u} | tojson)}')" \
    '[{tool_calls: [$s1, $s2, $s3, $s4, $c1, $f1]}, {text: "done"}]')"
broker_server "$(jq -s . <(fake_model pg openai pg))" \
    '{"web_private_cidrs": ["127.0.0.0/8", "::1/128"], "allow_private_cidrs": ["127.0.0.0/8", "::1/128"]}'
assert_contains "$DB" "postgresql://" "the server runs on PostgreSQL"
out=$(api POST /v1/connections -H 'Content-Type: application/json' -d "$(jq -nc \
    --arg url "http://127.0.0.1:$PG_PORT" '{name: "pg", base_url: $url, methods: ["GET"],
    headers: {"Authorization": "Bearer store-test"}}')")
assert_eq "${out##*HTTP }" 201 "create connection: $out"

id=$(run_create '{"prompt": "store", "model": "pg", "max_cost_micros": 500000, "web": true,
    "connections": ["pg"]}')
run=$(run_wait "$id" 120)
assert_eq "$(jq -r .status <<<"$run")" completed "status ($(jq -c .error <<<"$run"))"
res() { tool_result pg 1 "$1" | jq -r .stdout; }
assert_eq "$(res s1)" "403 000" "plain HTTP to the store's port"
assert_eq "$(res s2)" "000 403" "CONNECT to the store's port"
assert_eq "$(res s3)" "000 403" "CONNECT to the store's port by name"
assert_eq "$(res s4)" "200 200" "a loopback upstream at another port (the range is open)"
c1=$(res c1)
assert_eq "$(jq -r .error.code <<<"$c1")" address_not_allowed "a connection to the store"
assert_contains "$(jq -r .error.message <<<"$c1")" "server's own" "its reason"
assert_contains "$(tool_result pg 1 f1 | jq -r .error)" "127.0.0.1:$PG_PORT is the server's own address" "web_fetch of the store"
assert_eq "$(upstream_requests site | jq -r '[.[].path] | join(" ")')" "/control" "the control request"
echo ok
