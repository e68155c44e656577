#!/bin/bash
# Web through the broker (docs/BROKER.md), in a real sandbox through the real server: plain HTTP and
# CONNECT tunnels through the proxy environment (curl, Python's urllib); the SSRF guard refusing
# every other loopback form (127.0.0.2, [::1], [::ffff:127.0.0.2], 2130706434, 0x7f000002) with 403
# and no byte upstream, while 127.0.0.1 is allowed by broker.web_private_cidrs; a run without web
# or connections has no proxy at all; a large download against a small budget is cut at the byte
# where the budget ends, the run stops budget_exhausted and the ledger balances. A run whose web is
# {"allow": [...]} reaches the listed hosts only (requests, CONNECT and web_fetch). Every exchange
# is in the record (data.exchange).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agent_common.sh"
. "$(dirname "$0")/broker_common.sh"
cd "$TOP"

upstream_start site
U=$UP_PORT
code() { echo "curl -s -o /dev/null -w '%{http_code} %{http_connect}\\n' $*"; }
calls=$(jq -nc \
    --argjson get "$(shell_call w1 "curl -sS http://127.0.0.1:$U/plain")" \
    --argjson tun "$(shell_call w2 "curl -sS -p http://127.0.0.1:$U/tunnel")" \
    --argjson py "$(shell_call w3 "python3 -c 'import urllib.request as u; print(u.urlopen(\"http://127.0.0.1:$U/py\").read().decode(), end=\"\")'")" \
    --argjson r1 "$(shell_call w4 "$(code http://127.0.0.2:$U/r1)")" \
    --argjson r2 "$(shell_call w5 "$(code "http://[::1]:$U/r2")")" \
    --argjson r3 "$(shell_call w6 "$(code "http://[::ffff:127.0.0.2]:$U/r3")")" \
    --argjson r4 "$(shell_call w7 "$(code http://2130706434:$U/r4)")" \
    --argjson r5 "$(shell_call w8 "$(code http://0x7f000002:$U/r5)")" \
    --argjson r6 "$(shell_call w9 "$(code -p http://127.0.0.2:$U/r6)")" \
    --argjson r7 "$(shell_call w10 "curl -sS --request-target 'http://0x7f.0.0.2:$U/r7' http://127.0.0.1:$U/")" \
    --argjson f1 "$(jq -nc --arg u "http://127.0.0.1:$U/redirect?to=/html" '{id: "f1", name: "web_fetch", arguments: ({url: $u} | tojson)}')" \
    --argjson f2 "$(jq -nc --arg u "http://127.0.0.1:$U/redirect?to=http://127.0.0.2:$U/inside" '{id: "f2", name: "web_fetch", arguments: ({url: $u} | tojson)}')" \
    --argjson f3 "$(jq -nc '{id: "f3", name: "web_fetch", arguments: ({url: "file:///etc/passwd"} | tojson)}')" \
    '[{tool_calls: [$get, $tun, $py, $r1, $r2, $r3, $r4, $r5, $r6, $r7, $f1, $f2, $f3]}, {text: "done"}]')
fake_start web "$calls"
fake_start none "$(jq -nc --argjson c "$(shell_call n1 "env | grep -ci proxy; curl -sS -m 5 -x http://127.0.0.1:3128 http://127.0.0.1:$U/none 2>&1")" '[{tool_calls: [$c]}, {text: "done"}]')"
fake_start zdr "$(jq -nc --argjson c "$(shell_call z1 "curl -sS http://127.0.0.1:$U/private-path?token=zdrcanary")" '[{tool_calls: [$c]}, {text: "done"}]')"
fake_start allow "$(jq -nc \
    --argjson a1 "$(shell_call a1 "curl -sS http://127.0.0.1:$U/listed")" \
    --argjson a2 "$(shell_call a2 "$(code http://localhost:$U/unlisted)")" \
    --argjson a3 "$(shell_call a3 "$(code -p http://localhost:$U/unlisted-tunnel)")" \
    --argjson a4 "$(jq -nc --arg u "http://localhost:$U/html" '{id: "a4", name: "web_fetch", arguments: ({url: $u} | tojson)}')" \
    '[{tool_calls: [$a1, $a2, $a3, $a4]}, {text: "done"}]')"
fake_start big "$(jq -nc --argjson c "$(shell_call b1 "curl -sS http://127.0.0.1:$U/big?n=50000000 | wc -c")" '[{tool_calls: [$c]}, {text: "not reached"}]')"
# A price that makes bytes dear: 10 micros per request, 100000 per MiB.
broker_server "$(jq -s . <(fake_model web openai web) <(fake_model none openai none) \
    <(fake_model big openai big) <(fake_model zdr openai zdr) <(fake_model allow openai allow))" '' '{"web_micros_per_request": 10, "web_micros_per_mib": 100000}'

web_id=$(run_create '{"prompt": "browse", "model": "web", "max_cost_micros": 500000, "web": true}')
allow_id=$(run_create '{"prompt": "listed only", "model": "allow", "max_cost_micros": 100000,
    "web": {"allow": ["127.0.0.1"]}}')
none_id=$(run_create '{"prompt": "offline", "model": "none", "max_cost_micros": 100000}')
big_id=$(run_create '{"prompt": "download", "model": "big", "max_cost_micros": 30000, "web": true}')
zdr_id=$(run_create '{"prompt": "private", "model": "zdr", "max_cost_micros": 100000, "web": true,
    "zero_data_retention": true}')

run=$(run_wait "$web_id" 120)
assert_eq "$(jq -r .status <<<"$run")" completed "web status ($(jq -c .error <<<"$run"))"
check_settled "$run"
res() { tool_result web 1 "$1" | jq -r .stdout; }
assert_eq "$(res w1)" "GET /plain auth=[] body=[]" "plain HTTP through the proxy"
assert_eq "$(res w2)" "GET /tunnel auth=[] body=[]" "a CONNECT tunnel"
assert_eq "$(res w3)" "GET /py auth=[] body=[]" "Python's urllib"
for c in w4 w5 w6 w7 w8; do
    assert_eq "$(res $c)" "403 000" "$c refused"
done
assert_eq "$(res w9)" "000 403" "CONNECT to 127.0.0.2 refused"
assert_eq "$(res w10 | jq -r .error.code)" address_not_allowed "a hex-dotted host refused"
# web_fetch, executed by the broker: redirects followed and checked hop by hop, HTML as text.
f=$(tool_result web 1 f1)
assert_eq "$(jq -r .status <<<"$f")" 200 "web_fetch status"
assert_eq "$(jq -r .text <<<"$f")" "Fetched page

Hello & welcome" "web_fetch text"
assert_eq "$(jq -r .redirects <<<"$f")" 1 "web_fetch redirects"
assert_contains "$(tool_result web 1 f2 | jq -r .error)" "127.0.0.2 is not a public address (loopback)" "redirect to a loopback form refused"
assert_contains "$(tool_result web 1 f3 | jq -r .error)" "not an http(s) URL" "file:// refused"
ups=$(upstream_requests site)
assert_eq "$(jq -r '[.[].path | select(startswith("/big") or startswith("/private") or startswith("/listed") | not)] | sort | join(" ")' <<<"$ups")" \
    "/html /plain /py /redirect?to=/html /redirect?to=http://127.0.0.2:$U/inside /tunnel" \
    "only the allowed requests reached the upstream"
ev=$(run_events "$web_id")
# The broker's exchanges; each web_fetch call is one more web.request, the tool call's record.
assert_eq "$(jq '[.data[] | select(.type == "web.request" and (.data.call | not))] | length' <<<"$ev")" 14 "web events"
assert_eq "$(jq -c '[.data[] | select(.type == "web.request" and .data.call) | .data.call.id]' <<<"$ev")" '["f1","f2","f3"]' "web_fetch calls recorded"
assert_eq "$(jq '[.data[] | select(.type == "web.request" and .data.denied == "address_not_allowed")] | length' <<<"$ev")" 8 "refusal events"
assert_contains "$(jq -r '[.data[] | select(.type == "web.request")][0].message' <<<"$ev")" \
    "GET http://127.0.0.1:$U/plain → 200 · " "web event message"
assert_eq "$(jq .usage.web_requests <<<"$run")" 14 "usage.web_requests"

# The record of each exchange: the request as sent, the answer as the sandbox got it; a tunnel's
# target only.
x=$(jq -c '[.data[] | select(.type == "web.request")][0].data.exchange' <<<"$ev")
assert_eq "$(jq -r '.request.method + " " + .request.url' <<<"$x")" "GET http://127.0.0.1:$U/plain" "recorded request"
assert_eq "$(jq -r '.response.status' <<<"$x")" 200 "recorded status"
assert_eq "$(jq -r '.response.body_base64 | @base64d' <<<"$x")" "GET /plain auth=[] body=[]" "recorded body"
assert_eq "$(jq -c '[.data[] | select(.type == "web.request" and .data.scheme == "tunnel")][0].data.exchange' <<<"$ev")" \
    "{\"request\":{\"method\":\"CONNECT\",\"url\":\"127.0.0.1:$U\"},\"response\":{\"status\":200}}" "a tunnel's record"
assert_eq "$(jq '[.data[] | select(.type == "web.request" and .data.exchange == null and .data.call == null)] | length' <<<"$ev")" 0 "every exchange recorded"

# web: {"allow": [...]}: the listed host only, shown as asked in the run's permissions.
run=$(run_wait "$allow_id" 60)
assert_eq "$(jq -r .status <<<"$run")" completed "allow status ($(jq -c .error <<<"$run"))"
assert_eq "$(jq -c .permissions.web <<<"$run")" '{"allow":["127.0.0.1"]}' "permissions.web"
ares() { tool_result allow 1 "$1" | jq -r .stdout; }
assert_eq "$(ares a1)" "GET /listed auth=[] body=[]" "a listed host"
assert_eq "$(ares a2)" "403 000" "an unlisted host"
assert_eq "$(ares a3)" "000 403" "CONNECT to an unlisted host"
assert_contains "$(tool_result allow 1 a4 | jq -r .error)" "may not reach localhost" "web_fetch of an unlisted host"
ev=$(run_events "$allow_id")
assert_eq "$(jq -r '[.data[] | select(.type == "web.request" and (.data.call | not)) | .data.denied // "ok"] | join(",")' <<<"$ev")" \
    "ok,host_not_allowed,host_not_allowed,host_not_allowed" "allow-list events"
assert_not_contains "$(upstream_requests site)" "unlisted" "nothing unlisted reached the upstream"
assert_contains "$(fake_requests allow | jq -r '.[0].body.messages[0].content')" \
    "Only these hosts are allowed: 127.0.0.1 (*.name: its subdomains)" "prompt: the allow-list"

# No web, no connections: no proxy variables, nothing listening.
run=$(run_wait "$none_id" 60)
assert_eq "$(jq -r .status <<<"$run")" completed "offline status"
r=$(tool_result none 1 n1 | jq -r .stdout)
assert_contains "$r" "0" "no proxy variable"
assert_contains "$r" "Failed to connect to 127.0.0.1 port 3128" "no listener"

# Zero data retention: the egress record keeps method, status, counts and cost, nothing the
# sandbox chose (no host, nothing of the path: broker/event.h).
run=$(run_wait "$zdr_id" 60)
assert_eq "$(jq -r .status <<<"$run")" completed "zdr status"
ev=$(run_events "$zdr_id")
assert_eq "$(jq -c '[.data[] | select(.type == "web.request") | .data | keys]' <<<"$ev")" \
    '[["bytes_down","bytes_up","cost_micros","duration_ms","method","status"]]' "zdr event data"
assert_eq "$(jq -r '[.data[] | select(.type == "web.request")][0].message' <<<"$ev")" \
    "GET web → 200" "zdr event message"
assert_not_contains "$ev" "private-path" "zdr events"
assert_not_contains "$ev" "zdrcanary" "zdr events"

# The system prompt says web is on and offers web_fetch.
sys=$(fake_requests web | jq -r '.[0].body.messages[0].content')
assert_contains "$sys" "Web is on" "prompt: web on"
assert_contains "$sys" "HTTP_PROXY" "prompt: the proxy"
assert_eq "$(fake_requests web | jq -r '[.[0].body.tools[].function.name] | index("web_fetch") != null')" true "web_fetch offered"

# The budget ends mid-download: cut at the byte, budget_exhausted, the ledger balanced.
run=$(run_wait "$big_id" 120)
assert_eq "$(jq -r .status <<<"$run")" budget_exhausted "big status ($(jq -c .error <<<"$run"))"
check_settled "$run"
got=$(tool_result big 1 b1 2>/dev/null | jq -r .stdout 2>/dev/null)
[ -z "$got" ] || [ "$got" -lt 50000000 ] || fail "the whole download went through ($got bytes)"
assert_eq "$(jq .cost.charged_micros <<<"$run")" 30000 "the whole budget used, not a micro more"
[ "$(jq .cost.web_micros <<<"$run")" -gt 0 ] || fail "no web cost"
echo ok
