#!/bin/bash
# The API's edges (issue 10, part 4): a Request-Id on every answer, in every error body and in the
# log lines of its request; the errors the HTTP layer makes itself (405 with Allow, 413, HEAD) are
# the JSON error object and counted under their route in /metrics; unknown or repeated query
# parameters and an `after` that names no run are 400; Prefer: wait takes only wait=N with N from
# 0 to 600; the last admin key cannot revoke itself; connections by id or name, their answers
# carrying the name, and a base_url with user:password@ refused; credits bounded alike in the API
# and `ephemerald admin credit`, and applied once per idempotency key. No sandbox is needed.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/api_common.sh"
test_deadline 180
start_api_server '"max_body_bytes": 4096'
ADMIN=$EPHEMERAL_API_KEY
H=$TEST_TMP/headers

header() { # NAME: the value of a header in $H (the last answer's, saved with -D "$H")
    tr -d '\r' <"$H" | sed -n "s/^$1: //Ip" | tail -n 1
}
# same_id OUT: the error body's request_id is the answer's Request-Id header.
same_id() {
    local rid
    rid=$(header Request-Id)
    [[ $rid =~ ^req_[0-9a-f]{16}$ ]] || fail "no Request-Id header: $(cat "$H")"
    assert_eq "$(body_of "$1" | jq -r .error.request_id)" "$rid" "request_id in the body"
}

# Request-Id on a success, and a different one on each answer.
api GET /v1/balance -D "$H" >/dev/null
first=$(header Request-Id)
[[ $first =~ ^req_[0-9a-f]{16}$ ]] || fail "no Request-Id on a 200"
api GET /v1/balance -D "$H" >/dev/null
[ "$(header Request-Id)" != "$first" ] || fail "two answers with one Request-Id"

# 401, 404 and 400 carry it in the header and the body.
out=$(curl -sS -D "$H" -w '\nHTTP %{http_code}\n' "$EPHEMERAL_URL/v1/balance")
assert_error "$out" 401 authentication_error
same_id "$out"
out=$(api GET /v1/nothing -D "$H")
assert_error "$out" 404 not_found_error
same_id "$out"

# 405: the JSON error, with Allow naming what the path takes.
out=$(api DELETE /v1/runs -D "$H")
assert_error "$out" 405 invalid_request_error
same_id "$out"
assert_eq "$(header Allow)" "GET, HEAD, POST" "Allow on /v1/runs"
out=$(api PUT /v1/keys/key_x -D "$H")
assert_error "$out" 405 invalid_request_error
assert_eq "$(header Allow)" "DELETE" "Allow on /v1/keys/{id}"
out=$(curl -sS -X POST -D "$H" -w '\nHTTP %{http_code}\n' "$EPHEMERAL_URL/healthz")
assert_error "$out" 405 invalid_request_error
assert_eq "$(header Allow)" "GET, HEAD" "Allow on /healthz"

# HEAD: GET's status and headers without a body.
code=$(curl -sS -I -o "$H" -w '%{http_code}' "$EPHEMERAL_URL/v1/balance" \
    -H "Authorization: Bearer $ADMIN")
assert_eq "$code" 200 "HEAD /v1/balance"
[[ $(header Request-Id) =~ ^req_ ]] || fail "HEAD without Request-Id"
assert_eq "$(header Content-Type)" application/json "HEAD's Content-Type"
code=$(curl -sS -I -o /dev/null -w '%{http_code}' "$EPHEMERAL_URL/v1/balance")
assert_eq "$code" 401 "HEAD needs a key like GET"

# 413 with and without Content-Length: the JSON error.
big=$(head -c 5000 /dev/zero | tr '\0' a)
out=$(api POST /v1/runs -D "$H" -H 'Content-Type: application/json' \
    --data-binary "{\"prompt\": \"$big\", \"max_cost_micros\": 1}")
assert_error "$out" 413 invalid_request_error
same_id "$out"
out=$(api POST /v1/runs -H 'Content-Type: application/json' -H 'Transfer-Encoding: chunked' \
    --data-binary "{\"prompt\": \"$big\", \"max_cost_micros\": 1}")
assert_error "$out" 413 invalid_request_error

# Each of those is counted under its route.
metrics=$(curl -sS "$EPHEMERAL_URL/metrics")
for series in 'method="DELETE",route="/v1/runs",code="405"' 'method="POST",route="/v1/runs",code="413"' \
    'method="HEAD",route="/v1/balance",code="200"' 'method="POST",route="/healthz",code="405"' \
    'method="PUT",route="/v1/keys/{id}",code="405"'; do
    assert_contains "$metrics" "ephemeral_http_requests_total{$series}" "metrics series"
done

# Query parameters: only those a route takes, once each.
assert_error "$(api GET '/v1/balance?verbose=1')" 400 invalid_request_error verbose
assert_error "$(api GET '/v1/runs?limit=5&limit=6')" 400 invalid_request_error limit
assert_error "$(api GET '/v1/runs?limit=5&colour=red')" 400 invalid_request_error colour
assert_error "$(api GET '/v1/runs?limit=%2B5')" 400 invalid_request_error limit
assert_error "$(api GET '/v1/keys?all=true')" 400 invalid_request_error all
assert_error "$(api GET "/v1/runs/run_$(printf '0%.0s' $(seq 32))/events?since=1")" 400 invalid_request_error since
# after=<a run id that names no run of this org>: 400, not an empty last page.
assert_error "$(api GET "/v1/runs?after=run_$(printf 'f%.0s' $(seq 32))")" 400 invalid_request_error after
assert_eq "$(code_of "$(api GET '/v1/runs?limit=5')")" 200 "a known parameter"

# Prefer: wait. Refused before anything is created.
before=$(api GET /v1/balance | sed '$d' | jq .available_micros)
for p in 'wait=abc' 'wait=601' 'wait=-1' 'wait=' 'wait=1, wait=2' 'wait=1x' 'wait=99999999999999999999'; do
    out=$(create_run "$QUICK_PROMPT" 1000 -H "Prefer: $p")
    assert_error "$out" 400 invalid_request_error Prefer
done
assert_eq "$(api GET /v1/balance | sed '$d' | jq .available_micros)" "$before" "nothing reserved"
assert_eq "$(api GET '/v1/runs?limit=100' | sed '$d' | jq '.data | length')" 0 "no run created"
out=$(create_run "$QUICK_PROMPT" 1000 -H 'Prefer: respond-async, wait=0')
assert_eq "$(code_of "$out")" 201 "Prefer: respond-async, wait=0"
id=$(body_of "$out" | jq -r .id)
assert_error "$(api GET "/v1/runs/$id" -H 'Prefer: wait=later')" 400 invalid_request_error Prefer
# now that a run exists, after= names it: a page
assert_eq "$(code_of "$(api GET "/v1/runs?after=$id")")" 200 "after a known run"
api POST "/v1/runs/$id/cancel" >/dev/null

# Request ids in the log: the line that records a new key names the request that made it.
out=$(api POST /v1/keys -D "$H" -H 'Content-Type: application/json' -d '{"role": "admin"}')
assert_eq "$(code_of "$out")" 201 "second admin key"
rid=$(header Request-Id)
second=$(body_of "$out" | jq -r .key)
second_id=$(body_of "$out" | jq -r .id)
grep "key $second_id created" "$SERVER_LOG" | grep -q "request $rid" ||
    fail "the log line of the key's creation does not name request $rid"

# The last admin key cannot revoke itself; with another admin key it can be revoked.
admin_id=$(api GET /v1/keys | sed '$d' | jq -r --arg s "$second_id" \
    '[.data[] | select(.role == "admin" and .id != $s)][0].id')
out=$(as "$second" api DELETE "/v1/keys/$second_id")
assert_eq "$(code_of "$out")" 200 "revoke one of two admin keys"
out=$(api DELETE "/v1/keys/$admin_id")
assert_error "$out" 409 invalid_request_error
assert_eq "$(body_of "$out" | jq -r .error.code)" last_admin_key "error code"
assert_eq "$(code_of "$(api GET /v1/balance)")" 200 "the last admin key still works"

# Connections: by id or by name, answers with the name; no userinfo in base_url.
conn() { api POST /v1/connections -H 'Content-Type: application/json' -d "$1"; }
for url in 'https://user:pass@api.example' 'https://user@api.example/v1' 'http://a:b@127.0.0.1:9/'; do
    assert_error "$(conn "{\"name\": \"u\", \"base_url\": \"$url\"}")" 400 invalid_request_error base_url
done
out=$(conn '{"name": "gh", "base_url": "https://api.example/repos/a@b"}')
assert_eq "$(code_of "$out")" 201 "an '@' in the path is not userinfo"
cid=$(body_of "$out" | jq -r .id)
assert_eq "$(api GET "/v1/connections/$cid" | sed '$d' | jq -r .name)" gh "GET by id"
assert_eq "$(api GET /v1/connections/gh | sed '$d' | jq -r .id)" "$cid" "GET by name"
out=$(api DELETE "/v1/connections/$cid")
assert_eq "$(code_of "$out")" 200 "DELETE by id"
assert_eq "$(body_of "$out" | jq -r '.name + " " + .id')" "gh $cid" "DELETE's answer names it"
assert_error "$(api GET /v1/connections/gh)" 404 not_found_error
out=$(conn '{"name": "gl", "base_url": "https://gitlab.example"}')
gid=$(body_of "$out" | jq -r .id)
out=$(api DELETE /v1/connections/gl)
assert_eq "$(body_of "$out" | jq -r '.name + " " + .id')" "gl $gid" "DELETE by name"

# Credits: one bound for the API and the admin command; the balance cannot pass its cap.
credit() { api POST /v1/credits -H 'Content-Type: application/json' -d "{\"micros\": $1}" "${@:2}"; }
out=$(credit 1000000000000001)
assert_error "$out" 400 invalid_request_error micros
assert_contains "$(body_of "$out" | jq -r .error.message)" "at most" "which rule"
out=$(credit 9223372036854775807)
assert_error "$out" 400 invalid_request_error micros
"$EPHD" admin credit --db "$DB" --org default --micros 1000000000000001 2>"$TEST_TMP/admin.err" &&
    fail "admin credit took an amount the API refuses"
assert_contains "$(cat "$TEST_TMP/admin.err")" "at most" "admin credit says which rule"
"$EPHD" admin init --db "$DB" --org huge --credit-micros 1000000000000001 2>/dev/null &&
    fail "admin init took a first credit the API refuses"
# (the balance's own cap is eph_money_credit_refusal's, unit-tested in test_money)
# A credit with an idempotency key is applied once however many times it is sent.
new_org_key=$(new_org credits_once 1000) || fail "org"
for _ in 1 2 3; do
    out=$(as "$new_org_key" credit 7 -H 'Idempotency-Key: credit-once')
    assert_eq "$(code_of "$out")" 200 "credit with a key"
done
assert_eq "$(as "$new_org_key" api GET /v1/balance | sed '$d' | jq .balance_micros)" 1007 \
    "a credit applied once"
echo "edges: ok"
