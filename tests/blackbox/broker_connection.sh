#!/bin/bash
# Connections through the broker (docs/BROKER.md), in a real sandbox through the real server: the
# credential reaches the upstream and never the sandbox (environment, processes, files, outputs,
# events, database, logs); an upstream that echoes it back is redacted; method, path-prefix and
# unknown-connection denials (also the walk-arounds /allowed/../secret, %2e%2e, //) are 403 with
# docs/BROKER.md's JSON, an event, and no byte upstream; a run without web cannot reach the web. A
# credential given as a query parameter reaches the upstream's query and is redacted on the way
# back; a chunked upload is relayed; every exchange is in the record (data.exchange), credential-free.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agent_common.sh"
. "$(dirname "$0")/broker_common.sh"
cd "$TOP"
SECRET=brokercanary$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')

upstream_start api
API_PORT=$UP_PORT
make_test_ca
upstream_start tls --cert "$TEST_TMP/server.pem" --key "$TEST_TMP/server.key"
TLS_PORT=$UP_PORT
# The same CA's name on another certificate the broker must not trust: a self-signed one.
(cd "$TEST_TMP" && openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=127.0.0.1" \
    -addext subjectAltName=IP:127.0.0.1 -keyout rogue.key -out rogue.pem 2>/dev/null) || fail "rogue cert"
upstream_start rogue --cert "$TEST_TMP/rogue.pem" --key "$TEST_TMP/rogue.key"
ROGUE_PORT=$UP_PORT
UP_PORT=$API_PORT
P=http://127.0.0.1:3128
calls=$(jq -nc \
    --argjson ok "$(shell_call c1 "curl -sS -D - '$P/echo/allowed/x?q=1'")" \
    --argjson post "$(shell_call c2 "curl -sS -X POST -d 'hello=1' $P/echo/allowed/post")" \
    --argjson meth "$(shell_call c3 "curl -sS -X DELETE $P/echo/allowed/x")" \
    --argjson path "$(shell_call c4 "curl -sS $P/echo/secret")" \
    --argjson walk "$(shell_call c5 "curl -sS --path-as-is $P/echo/allowed/../secret")" \
    --argjson enc "$(shell_call c6 "curl -sS --path-as-is $P/echo/allowed/%2e%2e/secret")" \
    --argjson dbl "$(shell_call c7 "curl -sS --path-as-is $P/echo/allowed//../secret")" \
    --argjson unk "$(shell_call c8 "curl -sS $P/nope/allowed/x")" \
    --argjson web "$(shell_call c9 "curl -sS http://127.0.0.1:$UP_PORT/web")" \
    --argjson look "$(shell_call c10 "a=${SECRET:0:10}; b=${SECRET:10}; env; cat /proc/[0-9]*/cmdline | tr '\\0' ' '; grep -rl \"\$a\$b\" /tmp /home /etc /var /run /dev/shm 2>/dev/null; echo searched")" \
    --argjson tls "$(shell_call c11 "curl -sS $P/secure/allowed/tls")" \
    --argjson rogue "$(shell_call c12 "curl -sS $P/rogue/allowed/x")" \
    --argjson keyed "$(shell_call c13 "curl -sS '$P/keyed/allowed/q?x=1'")" \
    --argjson chunk "$(shell_call c14 "curl -sS -H 'Transfer-Encoding: chunked' --data-binary chunky=1 $P/echo/allowed/chunk")" \
    '[{tool_calls: [$ok, $post, $meth, $path, $walk, $enc, $dbl, $unk, $web, $look, $tls, $rogue, $keyed, $chunk]}, {text: "done"}]')
fake_start model "$calls"
broker_server "$(jq -s . <(fake_model fake openai model))" \
    "$(jq -nc --arg ca "$TEST_TMP/ca.pem" '{allow_private_cidrs: ["127.0.0.1/32"], extra_ca_file: $ca}')"

conn=$(jq -cn --arg s "$SECRET" --arg url "http://127.0.0.1:$UP_PORT" '{name: "echo",
    base_url: $url, methods: ["GET", "POST"], path_prefixes: ["/allowed"],
    headers: {"Authorization": ("Bearer " + $s)}}')
out=$(api POST /v1/connections -H 'Content-Type: application/json' -d "$conn")
assert_eq "${out##*HTTP }" 201 "create connection: $out"

for c in "secure https://127.0.0.1:$TLS_PORT" "rogue https://127.0.0.1:$ROGUE_PORT"; do
    conn=$(jq -cn --arg s "$SECRET" --arg n "${c%% *}" --arg url "${c#* }" '{name: $n,
        base_url: $url, methods: ["GET"], path_prefixes: ["/allowed"],
        headers: {"Authorization": ("Bearer " + $s)}}')
    out=$(api POST /v1/connections -H 'Content-Type: application/json' -d "$conn")
    assert_eq "${out##*HTTP }" 201 "create connection: $out"
done

# A credential the API wants in the query string (?key=).
conn=$(jq -cn --arg s "$SECRET" --arg url "http://127.0.0.1:$UP_PORT" '{name: "keyed",
    base_url: $url, methods: ["GET"], path_prefixes: ["/allowed"], query: {key: $s}}')
out=$(api POST /v1/connections -H 'Content-Type: application/json' -d "$conn")
assert_eq "${out##*HTTP }" 201 "create a query connection: $out"
assert_not_contains "$out" "$SECRET" "the created connection's answer"
list=$(api GET /v1/connections)
assert_not_contains "$list" "$SECRET" "the connection list"
assert_eq "$(jq -c '.data[] | select(.name == "keyed") | [.query_names, .header_names]' <<<"${list%HTTP*}")" \
    '[["key"],[]]' "query parameters shown by name only"

id=$(run_create '{"prompt": "call the api", "model": "fake", "max_cost_micros": 200000,
    "connections": ["echo", "secure", "rogue", "keyed"]}')
run=$(run_wait "$id" 120)
assert_eq "$(jq -r .status <<<"$run")" completed "status ($(jq -c .error <<<"$run"))"
check_settled "$run"

res() { tool_result model 1 "$1"; }
# The allowed call: the upstream got the credential; the sandbox saw it redacted, in the body and
# in the echoed header.
r=$(res c1 | jq -r .stdout)
assert_contains "$r" "HTTP/1.1 200" "allowed call"
assert_contains "$r" "GET /allowed/x?q=1 auth=[[REDACTED]]" "echoed credential redacted in the body"
assert_contains "$r" "X-Echo: [REDACTED]" "echoed credential redacted in a header"
assert_contains "$(res c2 | jq -r .stdout)" "POST /allowed/post auth=[[REDACTED]] body=[hello=1]" "POST with a body"
ups=$(upstream_requests api)
assert_eq "$(jq -r '[.[] | select(.path == "/allowed/x?q=1")][0].headers.authorization' <<<"$ups")" \
    "Bearer $SECRET" "the credential reached the upstream"
# Denials: 403 with the JSON reason, nothing upstream.
assert_eq "$(res c3 | jq -r .stdout | jq -r .error.code)" method_not_allowed "DELETE denied"
for c in c4 c5 c6 c7; do
    assert_eq "$(res $c | jq -r .stdout | jq -r .error.code)" path_not_allowed "$c denied"
done
assert_eq "$(res c8 | jq -r .stdout | jq -r .error.code)" unknown_connection "unknown connection"
assert_eq "$(res c9 | jq -r .stdout | jq -r .error.code)" web_not_allowed "no web without web"
assert_eq "$(jq 'length' <<<"$ups")" 4 "only the four allowed requests reached the upstream"
assert_eq "$(jq -r '[.[].path] | sort | join(" ")' <<<"$ups")" \
    "/allowed/chunk /allowed/post /allowed/q?x=1&key=$SECRET /allowed/x?q=1" "upstream paths"
# The query-parameter credential: in the upstream's query, redacted in what the sandbox saw.
assert_eq "$(res c13 | jq -r .stdout)" "GET /allowed/q?x=1&key=[REDACTED] auth=[] body=[]" "query credential redacted"
# A chunked upload: de-chunked and sent with its length.
assert_eq "$(res c14 | jq -r .stdout)" "POST /allowed/chunk auth=[[REDACTED]] body=[chunky=1]" "chunked upload"
assert_eq "$(jq -r '[.[] | select(.path == "/allowed/chunk")][0].headers["content-length"]' <<<"$ups")" 8 "chunked upload's length"
# Never in the sandbox: environment, processes, the files it can write (the image is read-only
# and older than the run). The command builds the value from two halves, so that its own command
# line does not hold it.
r=$(res c10 | jq -r .stdout)
assert_contains "$r" "searched" "the search ran"
assert_not_contains "$r" "$SECRET" "the credential inside the sandbox"
assert_contains "$r" "HTTP_PROXY=http://127.0.0.1:3128" "proxy environment"

# The system prompt says how to reach the connections, by name, and that web is off.
sys=$(fake_requests model | jq -r '.[0].body.messages[0].content')
assert_contains "$sys" "http://127.0.0.1:3128/NAME/PATH" "prompt: how to call a connection"
assert_contains "$sys" "echo (methods GET, POST; paths under /allowed); secure (methods GET; paths under /allowed); rogue (methods GET; paths under /allowed); keyed (methods GET; paths under /allowed)." \
    "prompt: the connections by name, with their methods and path prefixes"
assert_contains "$sys" "no internet access, only the connections" "prompt: web off"
assert_not_contains "$sys" "127.0.0.1:$UP_PORT" "prompt: not the upstream"
assert_eq "$(fake_requests model | jq -r '[.[0].body.tools[].function.name] | index("web_fetch")')" null "no web_fetch without web"

# HTTPS upstreams: verified against the system store plus broker.extra_ca_file; one whose
# certificate no trusted CA signed gets nothing (the credential is not sent to it).
assert_eq "$(res c11 | jq -r .stdout)" "GET /allowed/tls auth=[[REDACTED]] body=[]" "HTTPS connection"
assert_eq "$(jq -r '.[0].headers.authorization' <<<"$(upstream_requests tls)")" "Bearer $SECRET" "credential over TLS"
assert_eq "$(res c12 | jq -r .stdout | jq -r .error.code)" upstream_failed "untrusted certificate refused"
assert_eq "$(jq length <<<"$(upstream_requests rogue)")" 0 "nothing sent to the untrusted upstream"

# The timeline: one event per request, denials with their reason, never the credential.
ev=$(run_events "$id")
assert_eq "$(jq '[.data[] | select(.type == "connection.request")] | length' <<<"$ev")" 12 "connection events"
assert_eq "$(jq '[.data[] | select(.type == "web.request")] | length' <<<"$ev")" 1 "web events"
assert_eq "$(jq -r '[.data[] | select(.type == "connection.request" and .data.status == 200)][0].message' <<<"$ev")" \
    "echo · GET /allowed/x → 200" "event message"
assert_eq "$(jq -r '[.data[] | select(.type == "connection.request") | .data.denied // empty] | sort | join(",")' <<<"$ev")" \
    "method_not_allowed,path_not_allowed,path_not_allowed,path_not_allowed,path_not_allowed,unknown_connection" "denial reasons"
assert_eq "$(jq .usage.connection_requests <<<"$run")" 12 "usage.connection_requests"
# The record: every exchange, the connection-relative URL (never the injected key), the answer as
# the sandbox got it; no body of the record holds the credential either.
x=$(jq -c '[.data[] | select(.type == "connection.request" and .data.status == 200)][0].data.exchange' <<<"$ev")
assert_eq "$(jq -r '.request.method + " " + .request.url' <<<"$x")" "GET http://127.0.0.1:3128/echo/allowed/x?q=1" "recorded request"
assert_eq "$(jq -r '.response.body_base64 | @base64d' <<<"$x")" "GET /allowed/x?q=1 auth=[[REDACTED]] body=[]" "recorded response body"
assert_eq "$(jq -r '.response.headers | map(select(.[0] == "X-Echo"))[0][1]' <<<"$x")" "[REDACTED]" "recorded response header"
assert_eq "$(jq -r '[.data[] | .data.exchange.request.url // empty | select(contains("keyed"))][0]' <<<"$ev")" \
    "http://127.0.0.1:3128/keyed/allowed/q?x=1" "recorded URL without the query credential"
assert_eq "$(jq -r '[.data[] | .data.exchange.request | select(.url // "" | endswith("/chunk"))][0].body_base64 | @base64d' <<<"$ev")" \
    "chunky=1" "recorded chunked body"
assert_eq "$(jq '[.data[] | select(.type == "connection.request" or .type == "web.request") | select(.data.exchange == null)] | length' <<<"$ev")" 0 "every exchange recorded"
assert_not_contains "$(jq -r '.data[] | .data.exchange // empty | .request.body_base64, .response.body_base64 | values | @base64d' <<<"$ev")" \
    "$SECRET" "recorded bodies"
assert_eq "$(jq .usage.web_requests <<<"$run")" 1 "usage.web_requests"
[ "$(jq .cost.web_micros <<<"$run")" -gt 0 ] || fail "web cost not charged"
# Nowhere on the host but the sealed store: events, transcript, database file, logs.
assert_not_contains "$ev" "$SECRET" "events"
assert_not_contains "$(api GET "/v1/runs/$id/transcript")" "$SECRET" "transcript"
assert_not_contains "$run" "$SECRET" "run object"
! grep -rqa "$SECRET" "$TEST_TMP"/ephemeral.db* "$SERVER_LOG" || fail "credential in the database or the log"
! grep -qa "$SECRET" "$TEST_TMP/model.log" || fail "credential sent to the model"
echo ok
